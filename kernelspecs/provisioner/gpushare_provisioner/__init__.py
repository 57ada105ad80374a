"""gpushare_provisioner: a Jupyter kernel provisioner for gpushare.

It starts kernels exactly as jupyter_client's LocalProvisioner does, and
besides

* puts the kernel id (GPUSHARE_KERNEL_ID) and the notebook's identity
  (JPY_SESSION_NAME when the server knows it, GPUSHARE_USER) into the
  kernel's environment, so that gpushare-launch and the hook name the
  notebook's session without guessing it from a file name;
* registers the kernel with gpushare-broker when it starts and restarts,
  and unregisters it when it is shut down, restarted or killed: the server
  always knows when a kernel is gone, even when the kernel was killed with
  its whole process group and could not say so itself.

The broker client (broker_client.py) is pure Python on pyzmq and never
holds the server up for more than about a second when the broker is
missing or hangs.  `gpushare kernelspec install` selects it where the
server's python can load it (`--provisioner` insists).  Where the server
does not pass JPY_SESSION_NAME (notebook 6, jupyter_server 1), the
notebook's path is taken from its session table once the session is saved.
"""
from .broker_client import BrokerClient, BrokerError, broker_endpoint
from .provisioner import GpushareProvisioner

__version__ = "0.1.0"
__all__ = ["GpushareProvisioner", "BrokerClient", "BrokerError", "broker_endpoint",
           "__version__"]
