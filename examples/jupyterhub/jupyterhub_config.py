# JupyterHub configuration offering the "Shared GPU" kernel to every user:
# Debian's jupyterhub 3.0 with its defaults (PAM login, each user's
# notebook server started as that Unix user by LocalProcessSpawner) plus
# the three gpushare lines.  Start it with `jupyterhub -f THIS_FILE`; see
# README.md next to it.
#
# gpushare needs, besides these lines: `make install` (which puts the
# Shared GPU kernelspec under PREFIX/share/jupyter/kernels) and the system
# broker running (`gpushare-broker --system`, /run/gpushare/broker.sock).
c = get_config()  # noqa: F821 (defined by JupyterHub when it reads this file)

c.JupyterHub.authenticator_class = "pam"  # Debian's default, said explicitly
c.JupyterHub.spawner_class = "localprocess"

# ---- gpushare: the three lines to add to an existing hub's config --------
import os  # noqa: E402

# Every user's kernels talk to one broker: the system service's socket
# (or the hub's own GPUSHARE_BROKER, when it was started with one).
c.Spawner.environment.update(
    {"GPUSHARE_BROKER": os.environ.get("GPUSHARE_BROKER", "ipc:///run/gpushare/broker.sock")})
# Every user's notebook server finds the system-wide Shared GPU kernelspec
# (/usr/local/share/jupyter is searched anyway; say so for another prefix).
c.Spawner.environment.update({"JUPYTER_PATH": "/usr/local/share/jupyter"})
# ---------------------------------------------------------------------------
