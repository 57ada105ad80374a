# JupyterHub configuration that offers the "Shared GPU" kernel to every
# user: Debian's jupyterhub 3.0 with its defaults (PAM login; each user's
# notebook server runs as that Unix user, started by LocalProcessSpawner)
# plus the three gpushare lines at the end.  README.md next to this file
# says what else the machine needs (gpushare installed, the system broker).
#
#   jupyterhub -f /path/to/jupyterhub_config.py
c = get_config()  # noqa: F821 (JupyterHub defines it when it reads this file)

c.JupyterHub.authenticator_class = "pam"  # Debian's defaults, said explicitly
c.JupyterHub.spawner_class = "localprocess"

# ---- gpushare: the three lines to add to an existing hub's config ----------
# LocalProcessSpawner passes the users' servers (and so their kernels) only
# the environment it is told to: the broker's address, and where the Shared
# GPU kernelspec is (`make install` puts it in PREFIX/share/jupyter/kernels;
# Jupyter searches /usr/local/share/jupyter anyway, name your prefix if it
# is another).  The hub's own GPUSHARE_BROKER, if set, wins over the system
# broker's socket.
import os  # noqa: E402
c.Spawner.environment.update({"GPUSHARE_BROKER": os.environ.get("GPUSHARE_BROKER", "ipc:///run/gpushare/broker.sock")})  # noqa: E501
c.Spawner.environment.update({"JUPYTER_PATH": "/usr/local/share/jupyter"})
