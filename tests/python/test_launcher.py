"""gpushare-launch: environment, exec in place, exit status, and a real
ipykernel started through it running a cell on the simulated GPU."""
import os
import subprocess

import pytest

import gstest


def launch(args, env=None, **kw):
    return subprocess.run([gstest.LAUNCH] + args, capture_output=True, text=True, timeout=30,
                          env=env, **kw)


def test_hook_is_prepended_to_existing_preload(sim):
    env = dict(sim, LD_PRELOAD="/lib/x86_64-linux-gnu/libm.so.6")
    r = launch(["--", "sh", "-c", 'echo "$LD_PRELOAD"'], env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == gstest.HOOK + ":/lib/x86_64-linux-gnu/libm.so.6"


def test_hook_is_not_duplicated(sim):
    env = dict(sim, LD_PRELOAD=gstest.HOOK)
    r = launch(["--", "sh", "-c", 'echo "$LD_PRELOAD"'], env=env)
    assert r.stdout.strip() == gstest.HOOK


def test_broker_option_sets_environment(sim, tmp_path):
    r = launch(["--broker", str(tmp_path / "b.sock"), "--", "sh", "-c", 'echo "$GPUSHARE_BROKER"'],
               env=sim)
    assert r.stdout.strip() == "ipc://%s" % (tmp_path / "b.sock")


def test_kernel_keeps_the_launchers_pid(sim):
    p = subprocess.Popen([gstest.LAUNCH, "--", "sh", "-c", "echo $$"], env=sim,
                         stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=10)
    assert int(out) == p.pid


def test_exit_status_is_the_commands(sim):
    assert launch(["--", "sh", "-c", "exit 7"], env=sim).returncode == 7


@pytest.mark.parametrize("args, rc, text", [
    ([], 2, "no command given"),
    (["--", "/nonexistent/kernel"], 127, 'cannot run "/nonexistent/kernel"'),
    (["--bogus", "--", "true"], 2, "Usage: gpushare-launch"),
    (["--broker", "udp://x", "--", "true"], 2, "only ipc:// is supported"),
    (["--broker", "tcp://h:1", "--", "true"], 2, "tcp:// is not supported"),
])
def test_bad_usage(sim, args, rc, text):
    r = launch(args, env=sim)
    assert r.returncode == rc
    assert text in r.stderr


def test_ipykernel_through_launcher_runs_simulated_gpu_cell(sim, tmp_path):
    """A real kernel (Debian's ipykernel) started the way the kernelspec
    starts it, running a cell that uses the simulated GPU under the hook."""
    kernels = gstest.install_kernelspec(tmp_path, sim)
    km, kc = gstest.start_kernel(kernels, sim)
    try:
        code = ("import os, gpusim\n"
                "gpusim.init()\n"
                "gpusim.launch(us=2000)\n"
                "gpusim.synchronize()\n"
                "print(os.environ['LD_PRELOAD'], gpusim.is_simulated(), gpusim.busy_ns() >= 2000000)")
        content, out, err = gstest.run_cell(kc, code)
        assert content["status"] == "ok", content
        assert out.split() == [gstest.HOOK, "True", "True"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
