"""The Debian packages (debian/), built once per run with dpkg-buildpackage
from a copy of the distributed tree (`make distdir`), installed with
`dpkg --root` into a private root whose maintainer scripts run there, never
on this machine (--force-script-chrootless: DPKG_ROOT is set, policy-rc.d
there says "do not start services").  From that root: the broker started
the way its unit starts it, a cell run through the installed Shared GPU
kernelspec on the simulated GPU, and the broker seeing that session; then
remove and purge, which must leave nothing of the packages behind.

Not the same as installing on the machine: the installed programs run from
the root's path (the kernelspec's argv[0] and the launcher's hook path get
the root's prefix), and the root holds none of the dependencies (--force-
depends): they are this machine's."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

import gstest
from gstest import Kernels, check_unit, service_conf, start_service_broker, systemd_verify

PACKAGES = ("gpushare-broker", "libgpushare-hook", "gpushare-launch",
            "python3-gpushare-provisioner")
HOOK = "/usr/lib/%s/libgpushare-hook.so"
SITE = "/usr/lib/python3/dist-packages"
WANTS = "/etc/systemd/system/multi-user.target.wants/gpushare-broker.service"

missing = [t for t in ("dpkg-buildpackage", "dh", "dh_python3", "fakeroot" if os.geteuid() else "dpkg")
           if not shutil.which(t)]
pytestmark = pytest.mark.skipif(bool(missing), reason="%s not installed (build-aux/install-deps."
                                "sh installs debhelper, dh-python; fakeroot for non-root)"
                                % ", ".join(missing))


def version():
    m = re.search(r"AC_INIT\(\[gpushare\], \[([^]]+)\]",
                  open(os.path.join(gstest.SRCDIR, "configure.ac")).read())
    return m.group(1)


def clean_env(**extra):
    """This process's environment less the outer make's (its jobserver) and
    the tests' simulated-GPU settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "DESTDIR")
           and not k.startswith(("GPUSHARE_", "GS_"))}
    env.pop("LD_PRELOAD", None)
    env.update(extra)
    return env


def build_cuda_dir():
    """The CUDA_DIR this build was configured with, for debian/rules."""
    m = re.search(r"(?m)^CUDA_DIR = (.*)$", open(os.path.join(gstest.BUILDDIR, "Makefile")).read())
    return m.group(1).strip()


@pytest.fixture(scope="module")
def debs():
    """dpkg-buildpackage -us -uc -b in a copy of the distributed tree; the
    directory holding the .debs (removed after this file's tests)."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="gs-deb-"))
    src = work / ("gpushare-" + version())
    try:
        # automake's distdir wants a path relative to the build directory.
        rel = os.path.relpath(src, os.path.realpath(gstest.BUILDDIR))
        r = subprocess.run(["make", "-s", "-C", gstest.BUILDDIR, "distdir", "distdir=" + rel],
                           capture_output=True, text=True, timeout=300, env=clean_env())
        assert r.returncode == 0, r.stderr
        subprocess.run(["chmod", "-R", "u+w", str(src)], check=True)  # distcheck's are read-only
        log = work / "build.log"
        # Niced: the build is CPU-bound and nothing here depends on its
        # speed, while the tests that run beside it (make check runs
        # several files at once) wait on timers that a busy CPU delays.
        # noopt (-O0, Debian's own option): what is tested is the packaging,
        # and the compiler's time is CI's (91 s against 103 s alone).
        with open(log, "w") as out:
            r = subprocess.run(["nice", "-n", "10", "dpkg-buildpackage", "-us", "-uc", "-b"],
                               cwd=src, stdout=out,
                               stderr=subprocess.STDOUT, timeout=1200,
                               env=clean_env(DEB_BUILD_OPTIONS="parallel=2 noautodbgsym noopt",
                                             CUDA_DIR=build_cuda_dir()))
        assert r.returncode == 0, "dpkg-buildpackage failed:\n" + log.read_text()[-4000:]
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def deb_files(debs):
    found = {p.name.split("_")[0]: p for p in debs.glob("*.deb")}
    assert sorted(found) == sorted(PACKAGES), sorted(found)
    return [found[p] for p in PACKAGES]


class Root:
    """A private root for dpkg --root, with stand-ins for what its
    maintainer scripts must not do to this machine."""

    def __init__(self, path):
        self.path = path
        dpkg = path / "var/lib/dpkg"
        (dpkg / "info").mkdir(parents=True)
        (dpkg / "updates").mkdir()
        (dpkg / "status").write_text("")
        (path / "etc").mkdir()
        (path / "etc/group").write_text("root:x:0:\n")  # groupadd --prefix edits these
        (path / "etc/gshadow").write_text("root:*::\n")
        policy = path / "usr/sbin/policy-rc.d"  # Debian's "no service starts in here"
        policy.parent.mkdir(parents=True)
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        (path / "var/log").mkdir()
        # What this test put there, groupadd's backups of it, dpkg's log.
        self.ours = self.files() + ["/etc/group-", "/etc/gshadow-", "/var/log/dpkg.log"]
        # dh-python's py3compile/py3clean and systemctl ignore DPKG_ROOT: the
        # stand-ins do the same to the package's files inside the root.
        shim = path.parent / "shim"
        shim.mkdir()
        for tool in ("py3compile", "py3clean"):
            (shim / tool).write_text(
                "#!/bin/sh\n[ \"$1\" = -p ] || exit 2\n"
                "dpkg --root=\"$DPKG_ROOT\" -L \"$2\" | grep '\\.py$' | "
                "sed \"s|^|$DPKG_ROOT|\" | xargs -r /usr/bin/%s\n" % tool)
        (shim / "systemctl").write_text("#!/bin/sh\nexit 0\n")
        for f in shim.iterdir():
            f.chmod(0o755)
        self.env = clean_env(PATH="%s:/usr/sbin:/usr/bin:/sbin:/bin" % shim)

    def dpkg(self, *args):
        cmd = ["dpkg", "--root=%s" % self.path, "--log=%s" % (self.path / "var/log/dpkg.log"),
               "--force-script-chrootless", "--force-depends", "--force-not-root"] + list(args)
        if os.geteuid() != 0:
            cmd = ["fakeroot"] + cmd  # groupadd and chown want root
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=self.env)
        assert r.returncode == 0, "dpkg %s failed:\n%s%s" % (args, r.stdout, r.stderr)
        return r.stdout

    def files(self):
        """Every non-directory below the root, as /path."""
        return sorted("/" + str(p.relative_to(self.path)) for p in self.path.rglob("*")
                      if not p.is_dir() and "var/lib/dpkg" not in str(p))

    def __truediv__(self, rel):
        return self.path / rel.lstrip("/")


def host_state():
    """What the maintainer scripts or dpkg could do to this machine for our
    packages (only that: other changes may happen meanwhile)."""
    import grp
    try:
        group = grp.getgrnam("gpushare").gr_gid
    except KeyError:
        group = None
    pkgs = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Status}\\n"] + list(PACKAGES),
                          capture_output=True, text=True).stdout
    try:
        with open("/var/log/dpkg.log", errors="replace") as f:
            logged = sum("gpushare" in line for line in f)
    except OSError:
        logged = None
    return group, os.path.lexists(WANTS), os.path.exists("/etc/gpushare"), pkgs, logged


@pytest.fixture(scope="module")
def installed(debs):
    """The four packages installed into one root, for the tests that use them."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="gs-root-"))
    try:
        before = host_state()
        root = Root(base / "root")
        root.dpkg("-i", *map(str, deb_files(debs)))
        assert host_state() == before, "installing into the root changed this machine"
        root.multiarch = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"],
                                        capture_output=True, text=True).stdout.strip()
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_packages_hold_their_parts(debs):
    contents = {}
    for deb in deb_files(debs):
        assert deb.name.split("_")[1] == version(), \
            "debian/changelog's version is not configure.ac's: " + deb.name
        r = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                           check=True)
        contents[deb.name.split("_")[0]] = [ln.split()[5].lstrip(".") for ln in
                                            r.stdout.splitlines()]
    broker = contents["gpushare-broker"]
    for f in ("/usr/bin/gpushare-broker", "/usr/bin/gpushare", "/etc/gpushare/broker.conf",
              "/lib/systemd/system/gpushare-broker.service",
              "/usr/share/man/man8/gpushare-broker.8.gz"):
        assert f in broker, f
    assert any(f.endswith("/libgpushare-hook.so") for f in contents["libgpushare-hook"])
    launch = contents["gpushare-launch"]
    assert "/usr/bin/gpushare-launch" in launch
    assert "/usr/share/jupyter/kernels/shared-gpu/kernel.json" in launch
    assert SITE + "/gpushare_provisioner/provisioner.py" in contents["python3-gpushare-provisioner"]
    everything = [f for c in contents.values() for f in c]
    # The simulated driver is a test double and never ships.
    assert not [f for f in everything if "libcuda" in f or "gpusim" in f]
    fields = subprocess.run(["dpkg-deb", "-f", str(deb_files(debs)[2]), "Depends"],
                            capture_output=True, text=True, check=True).stdout
    assert "libgpushare-hook (= %s)" % version() in fields
    assert "python3-ipykernel" in fields


def test_maintainer_scripts_made_the_group_and_enabled_the_service(installed):
    root = installed
    assert re.search(r"(?m)^gpushare:x:\d+:", (root / "/etc/group").read_text())
    wants = root / WANTS
    assert os.readlink(wants) == "/lib/systemd/system/gpushare-broker.service"
    ks = json.loads((root / "/usr/share/jupyter/kernels/shared-gpu/kernel.json").read_text())
    assert ks["argv"][:3] == ["/usr/bin/gpushare-launch", "--", "/usr/bin/python3"]
    # The launcher preloads the packaged hook by its installed path.
    hook = HOOK % root.multiarch
    assert (root / hook).exists()
    assert hook.encode() in (root / "/usr/bin/gpushare-launch").read_bytes()
    assert "socket_group = gpushare" in (root / "/etc/gpushare/broker.conf").read_text()


def test_packaged_unit(installed, tmp_path):
    unit = installed / "/lib/systemd/system/gpushare-broker.service"
    check_unit(unit, "/usr/bin")
    if shutil.which("systemd-analyze"):
        rc, complaints = systemd_verify(unit, tmp_path, str(installed / "/usr/bin/gpushare-broker"))
        assert rc == 0 and not complaints, complaints


def test_provisioner_entry_point_is_found(installed):
    code = ("from importlib.metadata import entry_points; "
            "ep, = [e for e in entry_points(group='jupyter_client.kernel_provisioners') "
            "if e.name == 'gpushare-provisioner']; print(ep.load().__module__)")
    r = subprocess.run([gstest.PYTHON, "-c", code], capture_output=True, text=True, timeout=60,
                       env=clean_env(PYTHONPATH=str(installed / SITE)))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "gpushare_provisioner.provisioner"


CELL = ("import os, gpusim\n"
        "print(os.environ['LD_PRELOAD'])\n"
        "gpusim.init(); p = gpusim.alloc(1 << 20)\n"
        "for _ in range(5): gpusim.launch(us=2000)\n"
        "gpusim.synchronize(); gpusim.free(p)\n")


def test_service_broker_sees_a_cell_of_the_installed_kernel(installed, sim, tmp_path, short_tmp):
    root = installed
    unit = root / "/lib/systemd/system/gpushare-broker.service"
    argv = check_unit(unit, "/usr/bin")
    argv[0] = str(root / argv[0])
    conf = service_conf(tmp_path, root / "/etc/gpushare/broker.conf")
    hook = str(root / (HOOK % root.multiarch))
    env = dict(sim, GPUSHARE_HOOK=hook,
               PYTHONPATH=os.pathsep.join([gstest.GPUSIM_DIR, str(root / SITE)]))
    b = start_service_broker(argv, conf, short_tmp / "gpushare", env)
    cli = [str(root / "/usr/bin/gpushare"), "status", "--json"]
    # The installed kernelspec, its argv[0] under the root.
    kdir = tmp_path / "kernels" / "shared-gpu"
    shutil.copytree(root / "/usr/share/jupyter/kernels/shared-gpu", kdir)
    ks = json.loads((kdir / "kernel.json").read_text())
    ks["argv"][0] = str(root / ks["argv"][0])
    (kdir / "kernel.json").write_text(json.dumps(ks))
    kernels = Kernels(tmp_path, str(kdir.parent))  # as a notebook server starts them
    try:
        st = os.stat(short_tmp / "gpushare" / "broker.sock")
        assert (st.st_gid, st.st_mode & 0o777) == (os.getgid(), 0o660)
        kid, km, kc = kernels.start(b.env)
        content, out, err = gstest.run_cell(kc, CELL)
        assert content["status"] == "ok", err
        assert out.splitlines()[0] == hook

        last = {}

        def session():
            r = subprocess.run(cli, env=b.env, capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
            last["status"] = r.stdout
            for s in json.loads(r.stdout)["gpus"][0]["sessions"]:
                if s["kernel_id"] == kid and s["grants"] >= 1 and s["gpu_time_s"] > 0:
                    return s
        try:
            gstest.wait_until(session, what="the kernel's session at the broker")
        except AssertionError as e:
            raise AssertionError("%s:\n%s%s" % (e, b.log(), last.get("status", "")))
    finally:
        kernels.close()
        assert b.stop() == 0  # SIGTERM, as systemctl stop sends


def test_remove_then_purge_leaves_nothing(debs, tmp_path):
    before = host_state()
    root = Root(tmp_path / "root")
    debs_ = deb_files(debs)
    root.dpkg("-i", *map(str, debs_))
    shipped = set(root.files()) - set(root.ours)
    # Run-time leftovers a purge must take: bytecode, and the service's logs.
    assert list((root / SITE).rglob("*.pyc"))
    (root / "/var/log/gpushare").mkdir()
    (root / "/var/log/gpushare/events.jsonl").write_text("{}\n")
    (root / "/var/lib/gpushare").mkdir(parents=True)
    (root / "/var/lib/gpushare/broker.state").write_text("tq = 5\n")
    root.dpkg("--remove", *PACKAGES)
    left = set(root.files()) - set(root.ours)
    # The conffile, the logs, the saved settings and the service's
    # enablement stay until a purge.
    assert left == {"/etc/gpushare/broker.conf", "/var/log/gpushare/events.jsonl",
                    "/var/lib/gpushare/broker.state",
                    WANTS,
                    "/var/lib/systemd/deb-systemd-helper-enabled/gpushare-broker.service.dsh-also",
                    "/var/lib/systemd/deb-systemd-helper-enabled" + WANTS[len("/etc/systemd/system"):]
                    }, left
    root.dpkg("--purge", *PACKAGES)
    left = set(root.files()) - set(root.ours)
    assert not left, left
    assert not (root / "/etc/gpushare").exists() and not (root / "/var/log/gpushare").exists()
    assert not (root / "/var/lib/gpushare").exists()
    assert shipped and not shipped & set(root.files())
    # Debian keeps system groups after a purge (files may still name them).
    assert "gpushare:" in (root / "/etc/group").read_text()
    assert host_state() == before
