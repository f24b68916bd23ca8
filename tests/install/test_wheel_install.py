"""The wheel alone installs a working jupyterhub-gpu, as the JupyterLab extension template's CI checks it.

From a snapshot of the working tree (what a clean clone holds, plus the built Lab extension in
``labextension/prebuilt`` that ``make venv`` builds), ``python -m build`` makes the sdist and, from the sdist, the
wheel; ``python -m build --wheel`` makes the wheel from the tree, and the two wheels must hold the same files
with the same contents (their RECORDs). The wheel then goes into a fresh venv (no ``--system-site-packages``:
a missing dependency must show) with JupyterLab, and with no Node.js on PATH (the builds too run without it):

- ``jupyter labextension list`` shows jupyterhub-gpu enabled and OK, ``jupyter server extension list`` shows
  ``jupyterhub_gpu.serverext`` enabled and OK;
- the ``gpu-docker``, ``gpu-local`` and ``gpu-kube`` spawner entry points resolve and load, through
  ``importlib.metadata`` and through JupyterHub's own ``spawner_class`` option;
- that venv's ``jupyterhub`` runs ``config/demo_config.py`` as ``make demo`` does (the hub, and the gpu service
  it starts from the same venv's Python) and serves the spawn form, with the profiles a user's groups allow.

The one Node program is the proxy: JupyterHub's configurable-http-proxy is an npm package (the Makefile installs
it into .venv), so the fresh venv gets a two-line script that runs it with node's absolute path; nothing else
finds node.

uv installs, with ``-c constraints.txt``, into a venv made by the standard library's ``venv``: pip took 95 s for
the 125 packages here (its HTTP cache stays empty behind this network's proxy, so every run downloaded them
again) where uv takes 6 s from its cache (13 s cold), and ``python -m build --installer uv`` makes the isolated
build environments the same way. What is checked does not change: the wheel's own metadata decides what goes in.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
import requests
import uv

from tests.conftest import BIN, ROOT, free_port, wait_for

pytestmark = [pytest.mark.install, pytest.mark.xdist_group("install")]

NODE_PROGRAMS = {"node", "nodejs", "npm", "npx", "corepack", "yarn", "yarnpkg", "jlpm", "configurable-http-proxy"}
SYSTEM_BIN = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TIMINGS: dict[str, float] = {}


def run(argv, *, env, cwd, timeout=600, what="") -> str:
    """Run a command, its output (stdout and stderr together) returned; a failure shows the output."""
    started = time.monotonic()
    proc = subprocess.run(
        [str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    key = what or " ".join(Path(str(a)).name for a in argv[:2])
    TIMINGS[key] = TIMINGS.get(key, 0) + time.monotonic() - started
    output = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{output[-6000:]}"
    return output


def without_node(tmp: Path, first: list[Path]) -> dict:
    """An environment whose PATH is ``first`` and the system's programs less Node's (and no other venv)."""
    shim = tmp / "system-bin"
    shim.mkdir()
    for directory in map(Path, SYSTEM_BIN):
        if not directory.is_dir():
            continue
        for program in directory.iterdir():
            target = shim / program.name
            if program.name in NODE_PROGRAMS or target.exists() or not os.access(program, os.X_OK):
                continue
            target.symlink_to(program)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "JUPYTER", "CONDA"))}
    env["PATH"] = os.pathsep.join([*map(str, first), str(shim)])
    env["NO_COLOR"] = "1"
    assert shutil.which("node", path=env["PATH"]) is None
    assert shutil.which("jlpm", path=env["PATH"]) is None
    return env


def snapshot(dest: Path) -> Path:
    """The files of a clean clone (tracked and new, not ignored) and the built Lab extension, copied to ``dest``."""
    assert (ROOT / "labextension/prebuilt/package.json").exists(), (
        "labextension/prebuilt is missing: `make venv` (pip install -e .) builds it, with Node"
    )
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    files = [Path(os.fsdecode(name)) for name in listed if name]
    files += [p.relative_to(ROOT) for p in (ROOT / "labextension/prebuilt").rglob("*") if p.is_file()]
    for relative in files:
        source = ROOT / relative
        if source.is_file():  # a deleted but still tracked file is not in a clone of the next commit
            (dest / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / relative)
    return dest


def wheel_contents(wheel: Path) -> dict[str, str]:
    """Each file of a wheel and the sha256 of its bytes (RECORD itself as its text's lines, sorted)."""
    with zipfile.ZipFile(wheel) as z:
        found = {}
        for name in z.namelist():
            data = z.read(name)
            if name.endswith(".dist-info/RECORD"):
                found[name] = "\n".join(sorted(data.decode().splitlines()))
            else:
                found[name] = hashlib.sha256(data).hexdigest()
        return found


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the sdist, the wheel built from it, the wheel built from the tree), all built with no Node on PATH."""
    tmp = tmp_path_factory.mktemp("install-build")
    started = time.monotonic()
    tree = snapshot(tmp / "tree")
    TIMINGS["snapshot"] = time.monotonic() - started
    env = without_node(tmp, [])
    python = Path(sys.executable)
    build = [python, "-m", "build", "--installer", "uv"]  # isolated build environments, as pip's, made by uv
    run([*build, "--outdir", tmp / "from-sdist", tree], env=env, cwd=tmp, what="build sdist+wheel")
    run([*build, "--wheel", "--outdir", tmp / "from-tree", tree], env=env, cwd=tmp, what="build wheel")
    (sdist,) = (tmp / "from-sdist").glob("*.tar.gz")
    (from_sdist,) = (tmp / "from-sdist").glob("*.whl")
    (from_tree,) = (tmp / "from-tree").glob("*.whl")
    return sdist, from_sdist, from_tree


@pytest.fixture(scope="module")
def venv(built, tmp_path_factory):
    """A fresh venv holding the wheel (with its kubernetes extra, for gpu-kube) and JupyterLab, and its env."""
    tmp = tmp_path_factory.mktemp("install-venv")
    _, wheel, _ = built
    base_python = getattr(sys, "_base_executable", sys.executable)
    venv = tmp / "venv"
    env = without_node(tmp, [venv / "bin"])
    # the standard library's venv, without pip: uv installs into it (see the module's docstring)
    run([base_python, "-m", "venv", "--without-pip", venv], env=env, cwd=tmp, what="venv")
    requirements = ["jupyterlab", f"jupyterhub-gpu[kubernetes] @ {wheel.as_uri()}"]
    uv_pip = [uv.find_uv_bin(), "pip", "install", "--quiet", "--python", venv / "bin/python"]
    run(
        [*uv_pip, "--compile-bytecode", "-c", ROOT / "constraints.txt", *requirements],
        env=env,
        cwd=tmp,
        what="install",
    )
    # the proxy (npm's configurable-http-proxy, as make venv installs it) run by node's absolute path
    node = shutil.which("node")
    assert node, "Node.js runs JupyterHub's proxy; the test needs it (not on the venv's PATH)"
    proxy = venv / "bin/configurable-http-proxy"
    proxy.write_text(f'#!/bin/sh\nexec {node} {(BIN / "configurable-http-proxy").resolve()} "$@"\n')
    proxy.chmod(0o755)
    return venv, env, tmp


def service_commands(state: Path) -> list[list[str]]:
    """The first three words of each running gpu service's command line whose ledger is under ``state``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "jupyterhub_gpu.service" in argv and any(a.startswith("--db-url=") and str(state) in a for a in argv):
            found.append(argv[:3])
    return found


# -- the wheel and the sdist ----------------------------------------------------------------------------------


def test_the_wheel_carries_the_lab_extension_and_the_server_extension_config(built):
    _, wheel, _ = built
    names = set(zipfile.ZipFile(wheel).namelist())
    data = next(n.split("/")[0] for n in names if ".data/" in n)
    lab = f"{data}/data/share/jupyter/labextensions/jupyterhub-gpu"
    assert {f"{lab}/package.json", f"{lab}/install.json"} <= names
    assert any(re.fullmatch(rf"{lab}/static/remoteEntry\.[0-9a-f]+\.js", n) for n in names), sorted(names)[:40]
    assert f"{data}/data/etc/jupyter/jupyter_server_config.d/jupyterhub_gpu.json" in names
    # what the code reads at run time that is not Python
    assert "jupyterhub_gpu/service/web/openapi.yaml" in names
    assert "jupyterhub_gpu/spawners/templates/options_form.html" in names
    # the words, compiled at build time from the .po catalogs: the server's gettext catalog, and the JSON that
    # JupyterLab serves to the Lab extension (its jupyterlab.locale entry point names the package)
    assert "jupyterhub_gpu/locale/zh_CN/LC_MESSAGES/jupyterhub_gpu.mo" in names
    assert "jupyterhub_gpu/locale/zh_CN/LC_MESSAGES/jupyterhub_gpu.json" in names
    metadata = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    entry_points = zipfile.ZipFile(wheel).read(metadata).decode()
    assert re.search(r"^\[jupyterlab\.locale\]\njupyterhub_gpu = jupyterhub_gpu$", entry_points, re.M), entry_points


def test_the_sdist_carries_the_built_lab_extension(built):
    sdist, _, _ = built
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {
        "labextension/prebuilt/package.json",
        "pyproject.toml",
        "jupyter-config/jupyter_server_config.d/jupyterhub_gpu.json",
    } <= names
    assert not [n for n in names if "node_modules" in n or n.startswith(("docs/_build", ".venv"))]


def test_the_sdist_builds_the_same_wheel_as_the_tree(built):
    _, from_sdist, from_tree = built
    assert from_sdist.name == from_tree.name
    sdist_files, tree_files = wheel_contents(from_sdist), wheel_contents(from_tree)
    assert sorted(sdist_files) == sorted(tree_files)
    differ = [name for name in sdist_files if sdist_files[name] != tree_files[name]]
    assert not differ, f"files whose contents differ between the two wheels: {differ}"


# -- the installed venv ----------------------------------------------------------------------------------------


def test_the_venv_runs_the_installed_package_without_node(venv):
    path, env, tmp = venv
    out = run(
        [
            path / "bin/python",
            "-c",
            "import jupyterhub_gpu, shutil; print(jupyterhub_gpu.__file__, shutil.which('node'))",
        ],
        env=env,
        cwd=tmp,
    )
    where, node = out.split()
    assert Path(where).is_relative_to(path / "lib"), where
    assert node == "None"


def test_the_lab_extension_is_listed_enabled_and_ok(venv):
    path, env, tmp = venv
    out = run([path / "bin/jupyter", "labextension", "list"], env=env, cwd=tmp)
    assert re.search(r"^\s*jupyterhub-gpu v\S+ enabled OK \(python, jupyterhub-gpu\)$", out, re.M), out
    assert str(path / "share/jupyter/labextensions") in out, out
    assert "X " not in out and "is not compatible" not in out and "not found" not in out, out


def test_the_server_extension_is_listed_enabled_and_ok(venv):
    path, env, tmp = venv
    out = run([path / "bin/jupyter", "server", "extension", "list"], env=env, cwd=tmp)
    assert re.search(r"^\s*jupyterhub_gpu\.serverext enabled$", out, re.M), out
    assert re.search(r"^\s*jupyterhub_gpu\.serverext\s+OK$", out, re.M), out


def test_the_spawner_entry_points_resolve_and_load(venv):
    path, env, tmp = venv
    script = textwrap.dedent(
        """
        import json
        from importlib.metadata import entry_points
        from jupyterhub.app import JupyterHub
        from jupyterhub.spawner import Spawner

        found = {}
        for name in ("gpu-docker", "gpu-local", "gpu-kube"):
            (point,) = entry_points(group="jupyterhub.spawners", name=name)
            cls = point.load()
            hub = JupyterHub(spawner_class=name)  # JupyterHub's own reading of c.JupyterHub.spawner_class
            found[name] = [point.value, f"{cls.__module__}:{cls.__name__}", issubclass(cls, Spawner),
                           hub.spawner_class is cls]
        print(json.dumps(found))
        """
    )
    found = json.loads(run([path / "bin/python", "-c", script], env=env, cwd=tmp).strip().splitlines()[-1])
    assert found == {
        "gpu-docker": ["jupyterhub_gpu.spawners.docker.spawner:GPUDockerSpawner"] * 2 + [True, True],
        "gpu-local": ["jupyterhub_gpu.spawners.local:GPULocalSpawner"] * 2 + [True, True],
        "gpu-kube": ["jupyterhub_gpu.spawners.kube.spawner:GPUKubeSpawner"] * 2 + [True, True],
    }


@pytest.fixture(scope="module")
def demo_hub(venv):
    """That venv's ``jupyterhub`` running ``config/demo_config.py`` as ``make demo`` does: (url, venv, tmp)."""
    path, env, tmp = venv
    url = f"http://127.0.0.1:{free_port()}"
    hub_env = dict(
        env,
        JUPYTERHUB_GPU_DEMO_URL=url,
        JUPYTERHUB_GPU_DEMO_HUB_PORT=str(free_port()),
        JUPYTERHUB_GPU_DEMO_PROXY_API_PORT=str(free_port()),
        JUPYTERHUB_GPU_DEMO_SERVICE_PORT=str(free_port()),
        JUPYTERHUB_GPU_DEMO_STATE=str(tmp / "demo-state"),
    )
    log = tmp / "hub.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        # from a directory outside the repository, so that nothing imports the source tree
        hub = subprocess.Popen(
            [path / "bin/jupyterhub", "-f", ROOT / "config/demo_config.py"],
            cwd=tmp,
            env=hub_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def up():
        assert hub.poll() is None, f"the hub exited {hub.returncode}:\n{log.read_text(errors='replace')[-4000:]}"
        try:
            return requests.get(f"{url}/services/gpu/api/v1/openapi.yaml", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_for(up, timeout=120, what=f"the demo hub and its gpu service at {url} (log: {log})")
        TIMINGS["hub and service up"] = time.monotonic() - started
        yield url, path, tmp
    finally:
        hub.terminate()  # the hub stops the servers it started, the service and the proxy
        try:
            hub.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(hub.pid, signal.SIGKILL)
            hub.wait(10)
        print("install check timings (s):", {k: round(v, 1) for k, v in TIMINGS.items()})


def login(url: str, user: str) -> requests.Session:
    s = requests.Session()
    s.get(f"{url}/hub/login", timeout=10)
    r = s.post(
        f"{url}/hub/login",
        data={"username": user, "password": "demo", "_xsrf": s.cookies.get("_xsrf", "")},
        timeout=10,
    )
    assert r.status_code == 200, r.text[:500]
    return s


def test_a_hub_from_the_venv_runs_the_demo_config_and_serves_the_spawn_form(demo_hub):
    url, path, tmp = demo_hub
    forms = {}
    for user in ("alice", "bob"):  # alice is in the thesis group (the 2x T4 profile), bob in none
        r = login(url, user).get(f"{url}/hub/spawn", timeout=30)
        assert r.status_code == 200, r.text[:500]
        forms[user] = r.content.decode("utf-8")  # the hub's text/html names no charset: it is UTF-8
        (tmp / f"spawn-form-{user}.html").write_text(forms[user])
    for html in forms.values():
        assert 'name="profile"' in html and "Simulated" in html, f"the spawn form: {tmp}/spawn-form-*.html"
        assert "1× A100 (simulated)" in html and "CPU only" in html, f"the spawn form: {tmp}/spawn-form-*.html"
    profiles = {user: re.findall(r'\bid="profile-([\w-]+)"', html) for user, html in forms.items()}
    assert profiles == {
        "alice": ["t4", "a100", "t4x2", "t4-quarter", "t4-preemptible", "cpu"],
        "bob": ["t4", "a100", "t4-quarter", "t4-preemptible", "cpu"],
    }, profiles
    # the service that answered runs from the venv too: the hub started it with the venv's Python
    assert service_commands(tmp / "demo-state") == [[str(path / "bin/python"), "-m", "jupyterhub_gpu.service"]]


def test_a_server_from_the_venv_serves_the_installed_lab_extension(demo_hub):
    """The spawn form's CPU profile starts a server from the venv; its JupyterLab loads jupyterhub-gpu."""
    url, _, tmp = demo_hub
    s = login(url, "carol")
    form = s.get(f"{url}/hub/spawn", timeout=30)
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form.content.decode("utf-8")))
    started = time.monotonic()
    r = s.post(f"{url}/hub/spawn", data={**hidden, "profile": "cpu", "_xsrf": s.cookies.get("_xsrf", "")}, timeout=30)
    assert r.status_code == 200, r.text[:500]

    def lab():
        page = s.get(f"{url}/user/carol/lab", timeout=10)  # through the OAuth redirects of the server
        return page if page.status_code == 200 and "jupyter-config-data" in page.text else None

    page = wait_for(lab, timeout=120, what=f"carol's JupyterLab (log: {tmp / 'hub.log'})")
    TIMINGS["server up"] = time.monotonic() - started
    config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>\s*(\{.*?\})\s*</script>', page.text, re.S).group(1))
    (extension,) = [e for e in config["federated_extensions"] if e["name"] == "jupyterhub-gpu"]
    entry = s.get(f"{url}/user/carol/lab/extensions/jupyterhub-gpu/{extension['load']}", timeout=10)
    assert entry.status_code == 200 and "jupyterhub-gpu" in entry.text, entry.status_code
    settings = s.get(f"{url}/user/carol/lab/api/settings/jupyterhub-gpu:plugin", timeout=10)
    assert settings.status_code == 200, settings.text[:300]  # the schema the wheel ships
