"""Installs outside the demo (issue 35, item 3): a kernelspec written by
`make install prefix=DIR` or `gpushare kernelspec install`, used by a
Jupyter the user starts without run-demo.sh's PYTHONPATH, loads
gpushare_ipython from DIR and keeps the user's own PYTHONPATH."""
import json
import os
import subprocess

import pytest

import gstest


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The launcher and the kernelspecs directory (kernelspec, extension,
    provisioner) installed by `make install prefix=P`; returns P."""
    prefix = tmp_path_factory.mktemp("prefix")
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "DESTDIR", "PYTHONPATH")}
    for sub in ("launcher", "kernelspecs"):
        r = subprocess.run(["make", "-s", "-C", os.path.join(gstest.BUILDDIR, sub), "install",
                            "prefix=%s" % prefix], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    return prefix


def site_dir(prefix):
    r = subprocess.run([gstest.PYTHON, os.path.join(gstest.SRCDIR, "kernelspecs", "provisioner",
                                                    "sitedir.py"), str(prefix)],
                       capture_output=True, text=True, check=True)
    return r.stdout.strip()


def user_env(broker, tmp_path):
    """The broker's kernel environment as a user's own Jupyter has it: no
    build-tree PYTHONPATH, but one of the user's own (with usermod)."""
    mine = tmp_path / "my-python"
    mine.mkdir()
    (mine / "usermod.py").write_text("VALUE = 42\n")
    return gstest.kernel_env(broker.env, PYTHONPATH=str(mine)), str(mine)


CELL = """\
import sys, usermod, gpushare_ipython
ext = get_ipython().extension_manager.loaded
print("loaded", "gpushare_ipython" in ext, usermod.VALUE)
print("from", gpushare_ipython.__file__.startswith(%(pydir)r + "/"))
print("order", sys.path.index(%(mine)r) < sys.path.index(%(pydir)r))
"""


def check_kernel(kernels, env, mine, pydir):
    km, kc = gstest.start_kernel(kernels, env)
    try:
        content, out, err = gstest.run_cell(kc, CELL % {"mine": mine, "pydir": pydir})
        assert content["status"] == "ok", (content, err)
        assert "loaded True 42" in out and "from True" in out and "order True" in out, out
        content, out, err = gstest.run_cell(kc, "%gpushare wait")
        assert "the wait line is after 1 s" in out, (content, out, err)
        # %gpushare status: from the broker, through the client in pydir
        shown = []
        kc.execute_interactive("%gpushare status", timeout=120, output_hook=shown.append)
        text = "".join(m["content"].get("data", {}).get("text/plain", "") +
                       m["content"].get("text", "") for m in shown)
        assert "no broker" not in text and text.strip(), text
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_make_install_prefix_kernel_loads_the_extension(installed, broker, tmp_path):
    pydir = site_dir(installed)
    kernels = installed / "share" / "jupyter" / "kernels"
    with open(kernels / "shared-gpu" / "kernel.json") as f:
        argv = json.load(f)["argv"]
    assert argv[:4] == [str(installed / "bin" / "gpushare-launch"), "--pythonpath", pydir, "--"]
    env, mine = user_env(broker, tmp_path)
    check_kernel(str(kernels), env, mine, pydir)


def test_cli_kernelspec_beside_an_installed_launcher(installed, broker, tmp_path):
    """`gpushare kernelspec install` with the launcher of that install
    finds the same directory; with the build tree's launcher it adds none."""
    pydir = site_dir(installed)
    env, mine = user_env(broker, tmp_path)
    launcher = str(installed / "bin" / "gpushare-launch")
    r = subprocess.run([gstest.CLI, "kernelspec", "install", "--prefix", str(tmp_path / "ks"),
                        "--launcher", launcher, "--python", gstest.PYTHON, "--no-provisioner"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Its kernels get %s after their own PYTHONPATH" % pydir in r.stdout
    kernels = tmp_path / "ks" / "share" / "jupyter" / "kernels"
    with open(kernels / "shared-gpu" / "kernel.json") as f:
        assert json.load(f)["argv"][:4] == [launcher, "--pythonpath", pydir, "--"]
    check_kernel(str(kernels), env, mine, pydir)
    plain = gstest.install_kernelspec(tmp_path / "plain", env, "--no-provisioner")
    with open(os.path.join(plain, "shared-gpu", "kernel.json")) as f:
        assert "--pythonpath" not in json.load(f)["argv"]


def test_launcher_pythonpath_appends_once(tmp_path):
    env = dict(os.environ, PYTHONPATH="/mine:/other")
    show = [gstest.LAUNCH, "--no-hook", "--no-watch", "--pythonpath", "/opt/gs/site", "--",
            "/bin/sh", "-c", 'echo "$PYTHONPATH"']
    out = subprocess.run(show, env=env, capture_output=True, text=True, timeout=30).stdout
    assert out.strip() == "/mine:/other:/opt/gs/site"
    env["PYTHONPATH"] = "/opt/gs/site:/mine"
    out = subprocess.run(show, env=env, capture_output=True, text=True, timeout=30).stdout
    assert out.strip() == "/opt/gs/site:/mine"
    env.pop("PYTHONPATH")
    out = subprocess.run(show, env=env, capture_output=True, text=True, timeout=30).stdout
    assert out.strip() == "/opt/gs/site"
    r = subprocess.run(show[:4] + ["relative"] + show[5:], env=env, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "--pythonpath \"relative\": an absolute directory" in r.stderr


def test_one_pth_line_lets_the_server_load_the_provisioner(installed, tmp_path):
    """README's line for the provisioner: a .pth file in the server's
    python's (user) site directory naming the install's python directory;
    `gpushare kernelspec install` then writes a spec that uses it."""
    pydir = site_dir(installed)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONUSERBASE"] = str(tmp_path / "userbase")
    user_site = subprocess.run([gstest.PYTHON, "-m", "site", "--user-site"], env=env,
                               capture_output=True, text=True, check=True).stdout.strip()
    args = [gstest.CLI, "kernelspec", "install", "--prefix", str(tmp_path / "ks"), "--launcher",
            str(installed / "bin" / "gpushare-launch"), "--python", gstest.PYTHON]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "through the plain launcher" in r.stdout, r.stdout + r.stderr
    os.makedirs(user_site)
    with open(os.path.join(user_site, "gpushare.pth"), "w") as f:
        f.write(pydir + "\n")
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "through the gpushare provisioner" in r.stdout, \
        r.stdout + r.stderr
    with open(tmp_path / "ks" / "share" / "jupyter" / "kernels" / "shared-gpu" /
              "kernel.json") as f:
        ks = json.load(f)
    assert ks["metadata"]["kernel_provisioner"]["provisioner_name"] == "gpushare-provisioner"
