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
# Every user's kernels talk to the machine's one broker (the system
# service's socket, or the hub's own GPUSHARE_BROKER if it has one), not
# to a per-user broker their user might run; LocalProcessSpawner passes a
# user's server only the environment it is told to.  And every user's
# server finds the Shared GPU kernelspec: Jupyter searches /usr/share and
# /usr/local/share (the package's and `make install`'s places) anyway;
# name your prefix here if you installed elsewhere.
import os  # noqa: E402
c.Spawner.environment.update({"GPUSHARE_BROKER": os.environ.get("GPUSHARE_BROKER", "ipc:///run/gpushare/broker.sock")})  # noqa: E501
c.Spawner.environment.update({"JUPYTER_PATH": "/usr/local/share/jupyter"})
