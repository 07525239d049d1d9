"""Workers: pack processes, how they are launched, and the memory broker between them."""

from ._broker import Broker
from ._supervisor import HostValue, Supervisor, WorkerProcess

__all__ = ("Broker", "HostValue", "Supervisor", "WorkerProcess")
