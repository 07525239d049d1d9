"""Where models come from: importers (Hugging Face), fetching files (resumable), size estimates
over HTTP, downloads, and the secrets hosted nodes name."""

from ._downloads import DownloadRefused, DownloadService
from ._estimate import estimate_folder, estimate_plan
from ._hf import CATEGORY_DIRS, HubError, describe, parse_source, plan_import, resolve_token
from ._hosted import HostedModel, HostedNode, hosted_model, hosted_text_models
from ._import import pending, run_import, stage_dir
from ._pull import (
    STAGING,
    Fetch,
    PullError,
    fetch,
    is_present,
    node_models,
    plan_fetches,
    staging_dir,
)
from ._secrets import (
    SECRET_PARAM_SUFFIX,
    SecretError,
    SecretStore,
    check_secret_name,
    check_service,
    named_secrets,
    secrets_for_call,
    secrets_reader,
)
from ._transfer import disk_problem, release_staging

__all__ = (
    "CATEGORY_DIRS",
    "SECRET_PARAM_SUFFIX",
    "STAGING",
    "DownloadRefused",
    "DownloadService",
    "Fetch",
    "HostedModel",
    "HostedNode",
    "HubError",
    "PullError",
    "SecretError",
    "SecretStore",
    "check_secret_name",
    "check_service",
    "describe",
    "disk_problem",
    "estimate_folder",
    "estimate_plan",
    "fetch",
    "hosted_model",
    "hosted_text_models",
    "is_present",
    "named_secrets",
    "node_models",
    "parse_source",
    "pending",
    "plan_fetches",
    "plan_import",
    "release_staging",
    "resolve_token",
    "run_import",
    "secrets_for_call",
    "secrets_reader",
    "stage_dir",
    "staging_dir",
)
