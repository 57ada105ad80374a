"""Ports no other process draws: for the tests' programs and the kernels
they start.

A port a test chooses for a program (and a port jupyter_client chooses for
a kernel) is free when chosen and bound by the program a moment later.  In
that moment, any connect() or bind(0) of a test running beside this one may
take it, and the kernel dies before it replies to kernel_info ("Address
already in use"; seen in CI).  reserve_port() closes that window:
jupyter_client's LocalPortCache draws its ports with it once install() ran
(in this process, or in a notebook server whose configuration imports this
module).

This module needs nothing but the standard library: a notebook server's
configuration file imports it."""
import socket


def reserve_port(host="127.0.0.1"):
    """A TCP port for a program that must be told its port before it starts.

    The port was bound (so it was free) and is left in TIME_WAIT (this side
    closed the connection first).  While TIME_WAIT lasts (60 s), Linux gives
    the port to no bind(0) and no connect() of another process, so a test
    running beside this one cannot draw the same number; a server binding
    it by number with SO_REUSEADDR (the broker's metrics, tornado, node,
    libzmq all set it) gets it.  What is left (someone binding this very
    number on purpose) is what gstest.with_ports() retries."""
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((host, 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        with socket.create_connection((host, port)) as cli:
            conn, _ = srv.accept()
            conn.close()  # the server side closes first: its end waits in TIME_WAIT
            cli.recv(1)
    return port


def install():
    """Make jupyter_client (in this process) give kernels reserved ports.
    Its own choice binds port 0 and closes the socket with an RST, which
    leaves the port to anyone until the kernel binds it a second later."""
    from jupyter_client.connect import LocalPortCache

    def find_available_port(self, ip):
        while True:
            port = reserve_port(ip or "127.0.0.1")
            if port not in self.currently_used_ports:
                self.currently_used_ports.add(port)
                return port

    LocalPortCache.find_available_port = find_available_port


def import_lines():
    """Python lines that make this module importable and import it, for a
    configuration file that another process (a server, a hub) runs."""
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    return "import sys\nsys.path.insert(0, %r)\nimport kernelports  # noqa: E402\n" % here


def server_config(config_dir):
    """Write a notebook server configuration file into config_dir (what its
    JUPYTER_CONFIG_DIR names; made if missing) that makes the server's
    kernels take reserved ports too."""
    import os
    os.makedirs(config_dir, exist_ok=True)
    with open(os.path.join(config_dir, "jupyter_notebook_config.py"), "w") as f:
        f.write(import_lines() + "kernelports.install()\n")
