"""Where models come from: importers (Hugging Face), size estimates over HTTP, downloads, and
the secrets hosted nodes name."""

from ._downloads import DownloadService
from ._downloads_api import DownloadsController, downloads_lifespan
from ._hosted import HostedModel, hosted_model, hosted_text_models
from ._import_cli import add_import_parsers, run_import_command
from ._secrets import SecretError, SecretStore, named_secrets, secrets_for_call
from ._secrets_cli import add_secrets_parser, run_secrets

__all__ = (
    "DownloadService",
    "DownloadsController",
    "HostedModel",
    "SecretError",
    "SecretStore",
    "add_import_parsers",
    "downloads_lifespan",
    "hosted_model",
    "hosted_text_models",
    "add_secrets_parser",
    "named_secrets",
    "run_import_command",
    "run_secrets",
    "secrets_for_call",
)
