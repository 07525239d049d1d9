"""Where models come from: importers (Hugging Face), size estimates over HTTP, downloads, and
the secrets hosted nodes name."""

from ._import_cli import add_import_parsers, run_import_command
from ._secrets import SecretError, SecretStore, named_secrets, secrets_for_call
from ._secrets_cli import add_secrets_parser, run_secrets

__all__ = (
    "SecretError",
    "SecretStore",
    "add_import_parsers",
    "add_secrets_parser",
    "named_secrets",
    "run_import_command",
    "run_secrets",
    "secrets_for_call",
)
