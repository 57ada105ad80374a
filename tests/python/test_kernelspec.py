"""The Shared GPU kernelspec: the CLI installer, the build's kernel.json,
and Jupyter's own tools finding and starting it."""
import json
import os
import subprocess

import pytest

import gstest


def install(*args, env=None):
    return subprocess.run([gstest.CLI, "kernelspec", "install"] + list(args), capture_output=True,
                          text=True, timeout=30, env=env)


def test_install_prefix_writes_absolute_kernel_json_and_logos(tmp_path, sim):
    r = install("--prefix", str(tmp_path), "--launcher", gstest.LAUNCH, "--broker",
                "/run/x/b.sock", env=sim)
    assert r.returncode == 0, r.stderr
    d = tmp_path / "share" / "jupyter" / "kernels" / "shared-gpu"
    ks = json.loads((d / "kernel.json").read_text())
    assert ks["display_name"] == "Shared GPU"
    assert ks["language"] == "python"
    assert ks["argv"][0] == gstest.LAUNCH
    assert ks["argv"][1] == "--"
    assert os.path.isabs(ks["argv"][2])
    assert "{connection_file}" in ks["argv"]
    assert ks["env"]["GPUSHARE_BROKER"] == "ipc:///run/x/b.sock"
    for logo in ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg"):
        assert (d / logo).stat().st_size > 0


def test_jupyter_kernelspec_list_shows_it(tmp_path, sim):
    assert install("--prefix", str(tmp_path), "--name", "sgpu", "--display-name", "My GPU",
                   "--launcher", gstest.LAUNCH, env=sim).returncode == 0
    env = dict(sim, JUPYTER_PATH=str(tmp_path / "share" / "jupyter"))
    r = subprocess.run([gstest.PYTHON, "-m", "jupyter_client.kernelspecapp", "list", "--json"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    specs = json.loads(r.stdout)["kernelspecs"]
    assert specs["sgpu"]["spec"]["display_name"] == "My GPU"


def test_user_install_honours_jupyter_data_dir(tmp_path, sim):
    env = dict(sim, JUPYTER_DATA_DIR=str(tmp_path / "data"))
    assert install("--user", "--launcher", gstest.LAUNCH, env=env).returncode == 0
    assert (tmp_path / "data" / "kernels" / "shared-gpu" / "kernel.json").exists()


def test_provisioner_variant_names_it_in_metadata(tmp_path, sim):
    env = dict(sim, PYTHONPATH=gstest.PROVISIONER_PATH)  # a python that has the provisioner
    assert install("--prefix", str(tmp_path), "--provisioner", "--launcher", gstest.LAUNCH,
                   env=env).returncode == 0
    ks = json.loads((tmp_path / "share/jupyter/kernels/shared-gpu/kernel.json").read_text())
    prov = ks["metadata"]["kernel_provisioner"]
    assert prov["provisioner_name"] == "gpushare-provisioner"


@pytest.mark.parametrize("args, text", [
    (["--python", "relative/python"], "--python"),
    (["--python", "/nonexistent/python3"], "--python"),
    (["--name", "bad name!"], "--name"),
    (["--user", "--prefix", "/tmp"], "choose one of"),
    (["--launcher", "gpushare-launch"], "absolute path"),
    (["--launcher", "/nonexistent/gpushare-launch"],
     "the launcher /nonexistent/gpushare-launch: No such file or directory (install gpushare, "
     "or name gpushare-launch with --launcher PATH)"),
    (["--broker", "udp://x"], "only ipc:// is supported"),
    (["--broker", "tcp://h:1"], "tcp:// is not supported"),
])
def test_bad_install_arguments(tmp_path, sim, args, text):
    r = install(*(args + ["--prefix", str(tmp_path)] if "--user" not in args else args), env=sim)
    assert r.returncode == 2
    assert text in r.stderr


def test_build_tree_kernel_json_is_valid():
    path = os.path.join(gstest.BUILDDIR, "kernelspecs", "shared-gpu", "kernel.json")
    ks = json.load(open(path))
    assert ks["display_name"] == "Shared GPU"
    assert ks["argv"][0].endswith("/bin/gpushare-launch")
    assert os.path.isabs(ks["argv"][0])


def test_kernel_manager_starts_shared_gpu_kernel(tmp_path, sim):
    kernels = gstest.install_kernelspec(tmp_path, sim)
    km, kc = gstest.start_kernel(kernels, sim)
    try:
        content, out, _ = gstest.run_cell(kc, "import os; print(os.environ['LD_PRELOAD'])")
        assert content["status"] == "ok"
        assert out.strip() == gstest.HOOK
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_nbclient_runs_the_example_notebook(tmp_path, sim):
    """examples/hello-shared-gpu.ipynb, executed by Debian's nbclient with
    the Shared GPU kernel on the simulated GPU."""
    text = gstest.run_example_notebook(tmp_path, gstest.install_kernelspec(tmp_path, sim), sim)
    assert "hook preloaded: True" in text
    assert "backend: simulated" in text
    # (no broker here: the notebook runs unshared, and says so)
    assert "of which this notebook waited 0.0 s for the GPU (0 waits)" in text
    assert "data OK: all 20 MiB read back bit-exact" in text
