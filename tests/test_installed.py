"""tune installed like a tool: bundled profiles by name, the examples with the installed path
filled in, shell completion, the man page, and defaults from config files and TUNE_*."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BLACKWELL, PROFILES, PROJECT, UNTUNED, run_tune

from reconciler.cli import config

TUNE = Path(sys.executable).parent / "tune"


def source_tree(target: Path) -> Path:
    """A copy of what `pip install .` builds from: setuptools writes build/ and *.egg-info
    beside the sources, which must stay out of the checkout."""
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(PROJECT / "reconciler", target / "reconciler", ignore=skip)
    shutil.copytree(PROJECT / "man", target / "man")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT / name, target / name)
    return target


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_plans_with_a_bundled_profile_from_anywhere(
    tmp_path: Path,
) -> None:
    """What `pipx install` does: a wheel into a new virtual environment, run from elsewhere."""
    source = source_tree(tmp_path / "source")
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, source],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("tune_gpu_host-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run(
        [venv / "bin/pip", "install", "-q", wheel], capture_output=True, text=True, timeout=600
    )
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plan = subprocess.run(
        [venv / "bin/tune", "plan", "blackwell-8x", "--root", UNTUNED],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        timeout=300,
    )
    assert plan.returncode == 2, plan.stderr
    assert "Plan: 29 to change (24 runtime, 5 reboot; 368 writes)" in plan.stdout
    cron = subprocess.run(
        [venv / "bin/tune", "examples", "cron"], capture_output=True, text=True, check=True
    )
    assert f"flock -n /var/lib/tune {venv / 'bin/tune'} check --quiet" in cron.stdout
    # Every example the source has is in the wheel, the alert rules among them.
    listed = subprocess.run(
        [venv / "bin/tune", "examples"], capture_output=True, text=True, check=True
    ).stdout
    examples = sorted(p.name for p in (PROJECT / "reconciler/examples").iterdir() if p.is_dir())
    assert [line.split(":")[0] for line in listed.splitlines()] == examples
    rules = subprocess.run(
        [venv / "bin/tune", "examples", "prometheus", "tune-alerts.yml"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert rules.stdout == (PROJECT / "examples/prometheus/tune-alerts.yml").read_text()
    # The man pages where pip puts a wheel's data files, and pipx links them from:
    # `man tune-apply` (issue #35, item 2).
    pages = venv / "share/man/man1"
    assert sorted(p.name for p in pages.glob("*.1")) == sorted(
        p.name for p in (PROJECT / "man/man1").glob("*.1")
    )
    if shutil.which("man"):
        env = {"MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat", "PATH": "/usr/bin:/bin"}
        shown = subprocess.run(
            ["man", "-M", str(venv / "share/man"), "tune-apply"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert "tune-apply - Make the host match a profile" in shown.stdout, shown.stderr
    # One version: the metadata pip installed is what `tune -V` prints.
    metadata = subprocess.run(
        [
            venv / "bin/python",
            "-c",
            "import importlib.metadata as m; print(m.version('tune-gpu-host'))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=elsewhere,
    )
    version = subprocess.run([venv / "bin/tune", "-V"], capture_output=True, text=True, check=True)
    assert version.stdout == f"tune, version {metadata.stdout.strip()}\n"


@pytest.mark.slow
def test_pipx_install_links_the_man_pages_and_the_installed_tune_completes_profiles(
    tmp_path: Path,
) -> None:
    """Issue #35: after `pipx install .`, `man tune-apply` shows the page and `tune plan <TAB>`
    offers the bundled profiles. The real pipx (the test extra), every directory it writes under
    tmp_path: pipx 1.3 and later links a package's share/man/man1 into PIPX_MAN_DIR."""
    assert importlib.util.find_spec("pipx"), "pipx is in the test extra: pip install -e '.[test]'"
    source = source_tree(tmp_path / "source")
    bin_dir, man_dir, pipx_home = tmp_path / "bin", tmp_path / "man", tmp_path / "pipx"
    # Nothing of the checkout (PYTHONPATH) or of the user (~/.local, XDG_*, PIPX_*) leaks in.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PIPX_", "XDG_", "_TUNE_")) and key not in ("PYTHONPATH", "HOME")
    }
    env |= {
        "HOME": str(tmp_path / "home"),
        "PIPX_HOME": str(pipx_home),
        "PIPX_BIN_DIR": str(bin_dir),
        "PIPX_MAN_DIR": str(man_dir),
        "PIPX_COMPLETION_DIR": str(tmp_path / "completions"),
    }
    installed = subprocess.run(
        [sys.executable, "-m", "pipx", "install", str(source)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert sorted(p.name for p in man_dir.glob("man1/*")) == sorted(
        p.name for p in (PROJECT / "man/man1").glob("*.1")
    )
    # `man` finds the page through PIPX_MAN_DIR alone (MANPATH replaces its search path).
    shown = subprocess.run(
        ["man", "-P", "cat", "tune-apply"],
        capture_output=True,
        text=True,
        env={
            "MANPATH": str(man_dir),
            "MANWIDTH": "100",
            "PATH": "/usr/bin:/bin",
            "HOME": env["HOME"],
        },
        timeout=60,
    )
    assert "tune-apply - Make the host match a profile" in shown.stdout, shown.stderr
    # The tune pipx put on PATH, from a directory that is not the checkout: its profiles are
    # the ones in pipx's environment, and bash's <TAB> after `tune plan ` offers them.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    tune = bin_dir / "tune"
    listed = subprocess.run(
        [tune, "profiles", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=elsewhere,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert str(pipx_home / "venvs/tune-gpu-host") in listed.stdout, listed.stdout
    completion = env | {
        "_TUNE_COMPLETE": "bash_complete",
        "COMP_WORDS": "tune plan ",
        "COMP_CWORD": "2",
    }
    done = subprocess.run(
        [tune], capture_output=True, text=True, env=completion, cwd=elsewhere, timeout=60
    )
    assert done.stdout.split() == ["plain,base-gpu-inference", "plain,blackwell-8x", "file,"]


def test_profiles_lists_the_bundled_ones_with_their_descriptions() -> None:
    result = run_tune("profiles")
    assert result.code == 0
    assert result.out.splitlines() == [
        "base-gpu-inference  Kernel, memory and network settings for any GPU inference host",
        "blackwell-8x        8x RTX PRO 6000 Blackwell, 2x EPYC 9335, Proxmox host serving "
        "SGLang from LXC 101",
    ]


def test_a_bundled_name_resolves_and_a_path_that_exists_wins(tmp_path: Path) -> None:
    by_name = run_tune("plan", "blackwell-8x", "--root", UNTUNED, "--format", "json")
    by_path = run_tune(
        "plan", PROFILES / "blackwell-8x.yaml", "--root", UNTUNED, "--format", "json"
    )
    assert (by_name.code, by_name.out) == (by_path.code, by_path.out)
    # The autouse fixture runs every test in tmp_path: a file of that name there wins.
    (tmp_path / "blackwell-8x").write_text("name: mine\nsysctl:\n  vm.swappiness: {value: 10}\n")
    assert "valid profile 'mine'" in run_tune("validate", "blackwell-8x").out
    missing = run_tune("plan", "no-such-profile", "--root", UNTUNED)
    assert missing.code == 64
    assert "no-such-profile: no such file, and no bundled profile of that name" in missing.err
    assert run_tune("plan", "./missing.yaml").err.endswith("./missing.yaml: no such file.\n")


def test_examples_are_printed_with_this_tune_s_path() -> None:
    cron = run_tune("examples", "cron")
    assert cron.code == 0
    assert f"flock -n /var/lib/tune {TUNE} check --quiet --since-apply" in cron.out
    timer = run_tune("examples", "systemd", "tune-check.timer")
    assert timer.out == (PROJECT / "examples/systemd/tune-check.timer").read_text()
    service = run_tune("examples", "systemd").out
    assert f"ExecStart={TUNE} check --quiet" in service
    assert "# ==> tune-check.service <==" in service and "# ==> tune-check.timer <==" in service
    assert run_tune("examples", "launchd").code == 64


def test_completion_scripts_complete_commands_and_options() -> None:
    for shell in ("bash", "zsh", "fish"):
        result = run_tune("completion", shell)
        assert result.code == 0 and "_TUNE_COMPLETE" in result.out, shell
    env = {
        **os.environ,
        "_TUNE_COMPLETE": "bash_complete",
        "COMP_WORDS": "tune pro",
        "COMP_CWORD": "1",
    }
    done = subprocess.run([TUNE], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["plain,probe", "plain,profiles"]
    env |= {"COMP_WORDS": "tune audit --inv", "COMP_CWORD": "2"}
    done = subprocess.run([TUNE], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["plain,--inventory"]


@pytest.mark.skipif(shutil.which("groff") is None, reason="needs groff (groff-base)")
def test_the_man_page_is_valid_roff_naming_every_command(tmp_path: Path) -> None:
    page = run_tune("man").out
    checked = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True, text=True
    )
    assert (checked.returncode, checked.stderr) == (0, "")
    commands = run_tune("--help").out.split("Commands:")[1].split()
    for name in ("plan", "apply", "audit", "profiles", "config", "completion"):
        assert name in commands
        assert f'.SS "tune {name}' in page, name


@pytest.fixture
def config_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    system = tmp_path / "etc/tune/config.toml"
    user = tmp_path / "home/.config/tune/config.toml"
    system.parent.mkdir(parents=True)
    user.parent.mkdir(parents=True)
    monkeypatch.setattr(config, "SYSTEM", system)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home/.config"))
    for key in config.KEYS:
        monkeypatch.delenv(config.ENV_PREFIX + key.upper(), raising=False)
    return system, user


def test_config_files_then_the_environment_then_the_command_line(
    config_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    system, user = config_files
    system.write_text('forks = 5\nsudo = true\ninventory = "/etc/ansible/hosts"\n')
    user.write_text("forks = 6\n")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host *\n")
    monkeypatch.setenv("TUNE_SSH_CONFIG", str(ssh_config))
    shown = [line.split() for line in run_tune("config").out.splitlines()]
    assert shown == [
        ["inventory", "/etc/ansible/hosts", str(system)],
        ["forks", "6", str(user)],
        ["ssh_config", str(ssh_config), "TUNE_SSH_CONFIG"],
        ["sudo", "true", str(system)],
    ]
    # Read where it is used, so --help shows where the default comes from, not a value.
    monkeypatch.setenv("TUNE_FORKS", "7")
    assert "default: forks in tune's config, else 20" in " ".join(
        run_tune("plan", "--help").out.split()
    )


def test_the_configured_inventory_serves_limit_and_never_a_bare_command(
    config_files: tuple[Path, Path], tmp_path: Path
) -> None:
    _, user = config_files
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\ng1 ansible_port=x\n")
    user.write_text(f'inventory = "{inventory}"\n')
    # A bare plan stays on this machine (here: the snapshot); --limit reaches the inventory.
    assert run_tune("plan", "blackwell-8x", "--root", UNTUNED).code == 2
    limited = run_tune("plan", "blackwell-8x", "--limit", "gpu")
    assert (limited.code, limited.err) == (
        64,
        f"{inventory}: g1: ansible_port 'x' is not a number.\n",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("forks = 0\n", "forks = 0: expected a number from 1 to 1000."),
        ('forks = "abc"\n', 'forks = "abc": expected a number from 1 to 1000.'),
        ("sudo = [1]\n", "sudo = an array: expected true or false."),
        ("forks = \n", "not valid TOML"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_it(
    config_files: tuple[Path, Path], text: str, message: str
) -> None:
    _, user = config_files
    user.write_text(text)
    result = run_tune("config")
    assert result.code == 64
    assert result.err.startswith(f"{user}: ") and message in result.err
    assert result.err.count("\n") == 1


def test_a_bad_setting_fails_only_the_commands_that_use_it(
    config_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #30, item 15: one bad value broke every command (a pull timer's included), in
    Python's words (`invalid literal for int() with base 10`)."""
    _, user = config_files
    fleet = ["plan", BLACKWELL, "-H", "127.0.0.1:1", "-H", "127.0.0.1:2"]
    user.write_text('forks = "abc"\n')
    # On this machine or a snapshot, forks is not used: nothing reads it.
    assert run_tune("validate", BLACKWELL).code == 0
    assert run_tune("plan", BLACKWELL, "--root", UNTUNED).code == 2
    planned = run_tune(*fleet)
    assert (planned.code, planned.err) == (
        64,
        f'{user}: forks = "abc": expected a number from 1 to 1000.\n',
    )
    user.write_text("")
    monkeypatch.setenv("TUNE_FORKS", "abc")
    assert run_tune("plan", BLACKWELL, "--root", UNTUNED).code == 2
    planned = run_tune(*fleet)
    said = "TUNE_FORKS=abc: expected a number from 1 to 1000.\n"
    assert (planned.code, planned.err) == (64, said)
    monkeypatch.delenv("TUNE_FORKS")
    user.write_text("ssh_config = 5\n")
    assert run_tune("plan", BLACKWELL, "--root", UNTUNED).code == 2
    reached = run_tune("plan", BLACKWELL, "-H", "127.0.0.1:1")
    assert (reached.code, reached.err) == (64, f"{user}: ssh_config = 5: expected a path.\n")


def test_an_unknown_setting_is_a_warning_once(config_files: tuple[Path, Path]) -> None:
    _, user = config_files
    user.write_text("colour = true\nforks = 4\n")
    result = run_tune("config")
    assert result.code == 0
    assert result.err == (
        f"tune: {user}: unknown setting colour ignored (tune reads inventory, forks, "
        "ssh_config, sudo).\n"
    )
    assert ["forks", "4", str(user)] in [line.split() for line in result.out.splitlines()]


def test_the_version_is_written_once_and_v_prints_it() -> None:
    """Issue #35, item 5: `tune --version`, `tune -V` and the package's metadata agree, because
    the metadata is built from the one `__version__`."""
    import tomllib

    import reconciler

    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "reconciler.__version__"}
    for flag in ("-V", "--version"):
        shown = run_tune(flag)
        assert (shown.code, shown.out) == (0, f"tune, version {reconciler.__version__}\n"), flag
