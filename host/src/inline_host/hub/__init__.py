"""Where models come from: importers (Hugging Face), size estimates over HTTP, downloads, and
the secrets hosted nodes name."""

from ._secrets import SecretError, SecretStore, named_secrets, secrets_for_call
from ._secrets_cli import add_secrets_parser, run_secrets

__all__ = (
    "SecretError",
    "SecretStore",
    "add_secrets_parser",
    "named_secrets",
    "run_secrets",
    "secrets_for_call",
)
