"""The README's first command, minus the package install and the build:
install into a staging root, then run-demo.sh brings up the broker and a
Jupyter Notebook server that offers the Shared GPU kernel, on the
simulated GPU, and says that it is simulated."""
import os
import subprocess

import gstest


def test_run_demo_smoke(tmp_path, sim):
    dest = tmp_path / "root"
    r = subprocess.run(["make", "-s", "-C", gstest.BUILDDIR, "install", "DESTDIR=%s" % dest],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    prefix = str(dest) + os.environ.get("GS_PREFIX", "/usr/local")
    assert os.path.exists(os.path.join(prefix, "bin", "gpushare-broker"))
    assert os.path.exists(os.path.join(prefix, "share/jupyter/kernels/shared-gpu/kernel.json"))
    # The simulated driver is a test double: make install never installs it.
    assert not list(dest.rglob("libcuda*"))
    assert not list(dest.rglob("gpusim*"))

    env = dict(sim, GPUSHARE_FORCE_SIM="1", HOME=str(tmp_path),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"))
    env.pop("GPUSHARE_BROKER", None)

    def run_demo(port):
        """run-demo.sh takes the notebook server's port up front."""
        r = subprocess.run([os.path.join(gstest.SRCDIR, "build-aux", "run-demo.sh"),
                            "--prefix", prefix,
                            "--simdir", os.path.join(gstest.BUILDDIR, "tests", "simcuda"),
                            "--notebooks", str(tmp_path), "--port", str(port), "--smoke"],
                           capture_output=True, text=True, timeout=180, env=env)
        if r.returncode != 0 and gstest.port_clash(r.stdout + r.stderr):
            raise gstest.PortInUse(r.stderr)
        return r

    r = gstest.with_ports(run_demo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SIMULATED GPU" in r.stdout
    assert 'offers "Shared GPU"' in r.stdout
    # gpushare status (printed by the demo) says it too.
    assert "SIMULATED GPU: no NVIDIA driver is in use" in r.stdout
