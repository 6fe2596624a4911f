"""``gea-graph sweep`` against a real PostgreSQL server, started by this test in a temporary folder: two workers
started at the same moment on one study, a worker killed mid-trial (SIGKILL) whose trial is failed and retried by
the next run, the outputs, and the one-line errors of a wrong storage or a study of other recipes. No password
reaches a file or a line of output.

The server is PostgreSQL's own ``initdb`` + ``pg_ctl`` (found on PATH, in ``$GEA_GRAPH_PG_BIN`` or in Debian's
``/usr/lib/postgresql/<version>/bin``) on a free TCP port of 127.0.0.1, with password (SCRAM) authentication; as root
it runs as the ``postgres`` user (PostgreSQL refuses root). The test is skipped, saying why, only where the binaries
are absent.
"""

from __future__ import annotations

import csv
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import optuna
import pytest

from tests.sweep.conftest import sweep_command, write_recipe

PASSWORD = "s3cr3t-Pw9"
USER = "sweeper"


def postgres_bin() -> Path | None:
    candidates = [os.environ.get("GEA_GRAPH_PG_BIN"), os.path.dirname(shutil.which("initdb") or ""),
                  *sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)]
    for folder in filter(None, candidates):
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres():
    """A private PostgreSQL cluster for this module: yields its URL (with the password); stopped and deleted after."""
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH, in $GEA_GRAPH_PG_BIN or in "
                    "/usr/lib/postgresql/*/bin: install the postgresql package to run the shared-storage test")
    as_user = None
    if os.geteuid() == 0:  # initdb and postgres refuse to run as root
        try:
            as_user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a 'postgres' user: PostgreSQL refuses to run as root")
    folder = Path(tempfile.mkdtemp(prefix="gea-graph-pg-"))

    def demote():
        if as_user is not None:
            os.setgid(as_user.pw_gid)
            os.setuid(as_user.pw_uid)

    def pg(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(bindir / args[0]), *args[1:]], preexec_fn=demote, capture_output=True, text=True,
                              timeout=120, check=False)

    (folder / "pw").write_text(PASSWORD + "\n")
    if as_user is not None:
        for path in (folder, folder / "pw"):
            os.chown(path, as_user.pw_uid, as_user.pw_gid)
    port = free_port()
    try:
        made = pg("initdb", "-D", str(folder / "data"), "-U", USER, f"--pwfile={folder / 'pw'}",
                  "--auth=scram-sha-256", "-E", "UTF8", "--no-sync")
        assert made.returncode == 0, made.stderr
        started = pg("pg_ctl", "-D", str(folder / "data"), "-l", str(folder / "server.log"), "-w", "-t", "60",
                     "-o", f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        assert started.returncode == 0, started.stderr + (folder / "server.log").read_text()
        yield f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres"
    finally:
        pg("pg_ctl", "-D", str(folder / "data"), "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def study_of(url: str, name: str = "pg:tiny") -> optuna.Study:
    from gea_graph.sweep.storage import with_driver

    return optuna.load_study(study_name=name, storage=with_driver(url))


def rows(out: Path) -> list[dict]:
    with open(out / "trials.csv", newline="") as f:
        return list(csv.DictReader(f))


def no_password_in(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


def test_two_workers_a_killed_worker_resume_and_outputs_on_postgresql(postgres, tmp_path, sweep_env, capsys,
                                                                      monkeypatch):
    from gea_graph.cli import main

    tiny = write_recipe(tmp_path, epochs=12)  # long enough a trial to kill it mid-way
    w1, w2 = tmp_path / "w1", tmp_path / "w2"
    common = ["--study", "pg", "--heartbeat", "2", "--seed", "5"]
    env = {**sweep_env, "GEA_GRAPH_STORAGE": postgres}
    # 1. two workers started at the same moment (one given the URL on its command line, one in the environment)
    a = subprocess.Popen(sweep_command(str(tiny), "--out", str(w1), "--trials", "3", "--storage", postgres, *common),
                         env=sweep_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    b = subprocess.Popen(sweep_command(str(tiny), "--out", str(w2), "--trials", "3", *common),
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    logs = [p.communicate(timeout=600)[0] for p in (a, b)]
    assert [a.returncode, b.returncode] == [0, 0], "\n".join(log[-3000:] for log in logs)
    trials = study_of(postgres).trials
    # a worker may open a trial while the other completes the third: that one is marked surplus (failed, never
    # trained, not counted), so the study still holds exactly 3 finished trials
    surplus = [t for t in trials if str(t.user_attrs.get("reason", "")).startswith("surplus")]
    assert all(t.state == optuna.trial.TrialState.FAIL and "run_dir" not in t.user_attrs for t in surplus)
    trials = [t for t in trials if t not in surplus]
    assert [t.number for t in trials] == [0, 1, 2]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert trials[0].params != trials[1].params  # drawn at the same moment by two workers, still distinct
    for trial in trials:  # each trial trained once, by one of the workers, in its own run folder
        done = [w for w in (w1, w2) if (w / trial.user_attrs["run_dir"] / "result.json").is_file()]
        assert len(done) == 1, trial.number
    assert all("[tiny " in log for log in logs)

    # 2. a worker killed mid-trial: its trial stays RUNNING, its run is not complete
    c = subprocess.Popen(sweep_command(str(tiny), "--out", str(w1), "--trials", "5", *common), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    killed = None
    while killed is None and time.monotonic() < deadline and c.poll() is None:
        for folder in sorted((w1 / "tiny").glob("trial*")):
            if int(folder.name[5:]) >= 3 and (folder / "metrics.csv").is_file():
                killed = int(folder.name[5:])
        time.sleep(0.05)
    assert killed is not None, c.communicate()[0][-3000:]
    c.send_signal(signal.SIGKILL)
    logs.append(c.communicate()[0])
    victim = study_of(postgres).trials[killed]
    assert victim.state == optuna.trial.TrialState.RUNNING
    assert not (w1 / victim.user_attrs["run_dir"] / "result.json").exists()

    # 3. the next run fails it (three silent heartbeats), retries it with its values, and completes the study
    monkeypatch.setenv("GEA_GRAPH_STORAGE", postgres)
    monkeypatch.setenv("GEA_GRAPH_DATA", sweep_env["GEA_GRAPH_DATA"])
    capsys.readouterr()
    assert main(["sweep", str(tiny), "--out", str(w1), "--trials", "5", *common, "--threads", "1"]) == 0
    resumed = capsys.readouterr()
    trials = study_of(postgres).trials
    states = [t.state for t in trials]
    assert states[killed] == optuna.trial.TrialState.FAIL
    finished = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert len(finished) == 5  # the study's total, the killed trial not among them
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].state == optuna.trial.TrialState.COMPLETE
    assert retries[0].params == victim.params
    table = rows(w1)
    assert [r["state"] for r in table] == [s.name for s in states]
    assert table[killed]["state"] == "FAIL" and table[killed]["val_metric"] == ""
    assert table[retries[0].number]["retry_of"] == str(killed)
    assert sum(r["state"] == "COMPLETE" for r in table) == 5
    assert (w1 / "best-tiny.yaml").is_file() and (w1 / "history-tiny.png").is_file()
    assert "## tiny (validation accuracy" in (w1 / "sweep.md").read_text()

    # 4. --report redraws another worker's folder from the shared storage
    assert main(["sweep", str(w2), "--report"]) == 0
    assert [r["trial"] for r in rows(w2)] == [r["trial"] for r in table]

    # 5. one-line errors, exit code 2, nothing written; never the password
    other = write_recipe(tmp_path, name="other")
    wrong = postgres.replace(PASSWORD, "wrong-pass")
    unreachable = postgres.rsplit(":", 1)[0].rsplit(":", 1)[0] + f":{PASSWORD}@127.0.0.1:1/postgres"
    for args, words in ((["--storage", wrong], "password authentication failed"),
                        (["--storage", unreachable], "cannot open the storage"),
                        (["--storage", "not-a-url"], "not a database URL")):
        assert main(["sweep", str(tiny), "--out", str(tmp_path / "w3"), "--trials", "5", *common, *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0] and "wrong-pass" not in err[0] and PASSWORD not in err[0], err
        assert not (tmp_path / "w3").exists()
    assert main(["sweep", str(other), "--out", str(tmp_path / "w4"), "--trials", "5", *common]) == 2
    err = capsys.readouterr().err
    assert "study 'pg' is a sweep of tiny, not of other" in err and not (tmp_path / "w4").exists()

    for text in (*logs, resumed.out, resumed.err):
        assert PASSWORD not in text
    for folder in (w1, w2):
        no_password_in(folder)
    assert "postgresql://sweeper:***@127.0.0.1" in (w1 / "sweep.md").read_text()
