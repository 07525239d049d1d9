"""The SDK's own version (semver); the host checks its major at handshake."""

from typing import Final

SDK_VERSION: Final = "1.7.0"
SDK_MAJOR: Final = int(SDK_VERSION.split(".", 1)[0])
