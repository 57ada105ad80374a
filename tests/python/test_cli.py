"""The gpushare command-line tool: errors people will meet first."""
import os
import re
import subprocess

import pytest

import gstest


def run(*args, env=None):
    return subprocess.run([gstest.CLI] + list(args), capture_output=True, text=True, timeout=10,
                          env=env)


def test_status_without_broker_says_so(tmp_path):
    r = run("--broker", str(tmp_path / "none.sock"), "status")
    assert r.returncode == 1
    assert "no broker is running at ipc://%s" % (tmp_path / "none.sock") in r.stderr


@pytest.mark.parametrize("args, rc, text", [
    ([], 2, "Usage: gpushare"),
    (["frobnicate"], 2, 'unknown command "frobnicate"'),
    (["--weird", "status"], 2, 'unknown option "--weird"'),
    (["--broker", "udp://x", "status"], 1, "only ipc:// is supported"),
    (["--broker", "tcp://127.0.0.1:5555", "status"], 1, "tcp:// is not supported"),
    (["status", "--bogus"], 2, "Usage: gpushare status"),
    # getopt's own messages name the whole command, not "status:"
    (["status", "--bogus"], 2, "gpushare status: unrecognized option '--bogus'"),
    (["kernelspec", "install", "-x"], 2, "gpushare kernelspec install: invalid option -- 'x'"),
    (["status", "extra"], 2, 'unexpected argument "extra"'),
    (["kernelspec"], 2, 'expected "install"'),
])
def test_bad_usage(args, rc, text):
    r = run(*args)
    assert r.returncode == rc
    assert text in r.stderr


def test_version_and_help():
    assert run("--version").stdout.startswith("gpushare ")
    assert "kernelspec install" in run("--help").stdout


def test_status_against_broker_json_and_text(broker):
    st = broker.status()
    assert st["policy"] == "adaptive"
    assert st["scheduler"] == "on"
    text = broker.cli("status").stdout
    assert st["gpus"][0]["uuid"] in text


def man_text(page):
    with open(os.path.join(gstest.SRCDIR, "doc", "man", page)) as f:
        return f.read().replace("\\-", "-").replace("\\fB", "").replace("\\fR", "") \
            .replace("\\fI", "")


def long_options(text):
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", text))


@pytest.mark.parametrize("page, commands", [
    ("gpushare.1", [[gstest.CLI], [gstest.CLI, "status"], [gstest.CLI, "top"],
                    [gstest.CLI, "set"], [gstest.CLI, "run"], [gstest.CLI, "kernelspec"],
                    [gstest.CLI, "kernelspec", "list"]]),
    ("gpushare-broker.8", [[gstest.BROKER]]),
    ("gpushare-launch.1", [[gstest.LAUNCH]]),
])
def test_help_and_man_page_name_the_same_options(page, commands):
    """Every option a --help names is in the man page, and every option of
    the man page's synopsis is in a --help."""
    helps = ""
    for argv in commands:
        r = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, (argv, r.stderr)
        helps += r.stdout
    man = man_text(page)
    synopsis = man[man.index(".SH SYNOPSIS"):man.index(".SH DESCRIPTION")]
    assert long_options(helps) - long_options(man) == set(), "options missing from " + page
    assert long_options(synopsis) - long_options(helps) == set(), "options missing from --help"
