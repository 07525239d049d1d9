"""Workers: pack processes, how they are launched (``_launcher`` is the seam, ``_choice`` the one
place that picks a launcher), and the memory broker between them."""

from ._broker import Broker
from ._bulk import HostBulk
from ._inventory import probe
from ._launcher import LaunchedWorker, LaunchFailed, WorkerLauncher
from ._parallel import parallel_problem
from ._process import SecretsReader, WorkerProcess
from ._ray_connect import join_cluster
from ._ray_models import kept_beside
from ._ray_placement import model_files
from ._supervisor import Supervisor

__all__ = (
    "Broker",
    "HostBulk",
    "LaunchFailed",
    "LaunchedWorker",
    "SecretsReader",
    "Supervisor",
    "WorkerLauncher",
    "WorkerProcess",
    "join_cluster",
    "kept_beside",
    "model_files",
    "parallel_problem",
    "probe",
)
