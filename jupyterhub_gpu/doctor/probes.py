"""The doctor's probe containers: the properties a lab needs, checked on the engine itself.

- :func:`isolation_probe`: two short-lived containers on the servers' network, one listening on 8888 as a
  server does, the other connecting to it at its address on that network. Docker's settings can say the
  network isolates (``enable_icc=false``) while the engine enforces nothing (``--iptables=false``): only a
  connection tells. A network the hub has not created yet is made for the probe (labelled, removed at once).
- :func:`image_gpu_probe`: whether the image can read a GPU (``import pynvml, jupyterhub_gpu.gpus.nvml``)
  and whether its packages agree (``pip check``; in an image without pip, the same check over the
  installed distributions' requirements), read in a container without network.

Every probe container carries the label :data:`~jupyterhub_gpu.doctor.docker.PROBE_LABEL`, runs with no
capabilities and no-new-privileges, is bounded in time, and is removed whatever happens.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from jupyterhub_gpu.doctor.docker import PROBE_LABEL, ProbeError, remove_probe, run_python
from jupyterhub_gpu.spawners.docker.objects import make_network_spec

PORT = 8888
LISTENER = (
    "import socket, time\n"
    "s = socket.socket()\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    f"s.bind(('0.0.0.0', {PORT}))\n"
    "s.listen()\n"
    "print('listening', flush=True)\n"
    "s.settimeout(1)\n"
    "end = time.monotonic() + float(__import__('sys').argv[1])\n"
    "while time.monotonic() < end:\n"
    "    try:\n"
    "        s.accept()[0].close()\n"
    "    except OSError:\n"
    "        pass\n"
)
CONNECTOR = (
    "import socket, sys\n"
    "s = socket.socket()\n"
    "s.settimeout(float(sys.argv[2]))\n"
    "try:\n"
    f"    s.connect((sys.argv[1], {PORT}))\n"
    "    print('open')\n"
    "except OSError as e:\n"
    "    print(type(e).__name__)\n"
)
#: What a connection that did not open looks like (refused, dropped by the engine's rules, no route).
CLOSED = ("ConnectionRefusedError", "TimeoutError", "timeout", "OSError", "ConnectionResetError")


@dataclass(frozen=True)
class Isolation:
    """What the probe saw: whether the connector reached the listener, and how."""

    reached: bool
    answer: str  # "open", or the connect error's name
    listener_ip: str
    network: str  # the network probed (the configured one, or a throwaway one of the same settings)
    throwaway: bool


def _errors():
    import docker as docker_py  # optional heavy dependency: docker-py (DockerSpawner's client)

    return docker_py.errors


def _container(client, image: str, network: str, user: str, code: str, args: list[str], role: str) -> str:
    host_config = client.create_host_config(
        network_mode=network,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        mem_limit="256m",
        pids_limit=64,
    )
    container = client.create_container(
        image,
        command=["-c", code, *args],
        entrypoint=["python3"],
        user=user or None,
        labels={PROBE_LABEL: role},
        host_config=host_config,
    )
    return container["Id"]


def _address(client, cid: str, network: str) -> str:
    networks = client.inspect_container(cid)["NetworkSettings"]["Networks"] or {}
    return (networks.get(network) or next(iter(networks.values()), {})).get("IPAddress") or ""


def _logs(client, cid: str) -> str:
    return client.logs(cid, stdout=True, stderr=True).decode("utf-8", "replace").strip()


def isolation_probe(
    client, network: str, image: str, *, subnet: str = "", internal: bool = True, user: str = "", timeout: float = 20
) -> Isolation:
    """Can a container on ``network`` open a TCP connection to another's port 8888? Raises ProbeError.

    A ``network`` that does not exist yet is stood in for by a throwaway one made as the hub would make it
    (``subnet``, ``internal``, ``enable_icc=false``), removed at the end.
    """
    errors = _errors()
    throwaway = None
    try:
        client.inspect_network(network)
        probed = network
    except errors.NotFound:
        throwaway = f"jupyterhub-gpu-doctor-{uuid.uuid4().hex[:8]}"
        spec = make_network_spec(name=throwaway, subnet=subnet, internal=internal)
        spec["labels"] = {PROBE_LABEL: "isolation-network"}  # not the hub's: no jupyterhub-gpu.managed
        try:
            client.create_network(**spec)
        except errors.APIError as e:
            raise ProbeError(f"could not make a probe network like {network!r}: {e.explanation or e}") from None
        probed = throwaway
    made: list[str] = []
    try:
        listener = _container(client, image, probed, user, LISTENER, [str(timeout + 10)], "isolation-listener")
        made.append(listener)
        client.start(listener)
        deadline = time.monotonic() + timeout
        while "listening" not in _logs(client, listener):
            state = client.inspect_container(listener)["State"]
            if not state.get("Running"):
                raise ProbeError(f"the listening probe exited: {_logs(client, listener)[-300:]}")
            if time.monotonic() > deadline:
                raise ProbeError(f"the listening probe did not listen within {timeout:g} s")
            time.sleep(0.2)
        ip = _address(client, listener, probed)
        if not ip:
            raise ProbeError(f"the listening probe has no address on {probed!r}")
        connector = _container(client, image, probed, user, CONNECTOR, [ip, "3"], "isolation-connector")
        made.append(connector)
        client.start(connector)
        status = client.wait(connector, timeout=timeout).get("StatusCode")
        answer = (_logs(client, connector).splitlines() or [""])[-1]
        if status != 0 or not answer:
            raise ProbeError(f"the connecting probe exited with {status}: {_logs(client, connector)[-300:]}")
    except errors.APIError as e:
        raise ProbeError(f"the probe containers did not run: {e.explanation or e}") from None
    except Exception as e:  # a time-out of the engine's wait (requests' ReadTimeout, ConnectionError)
        if isinstance(e, ProbeError):
            raise
        raise ProbeError(f"the probe containers did not answer in time: {type(e).__name__}: {e}") from None
    finally:
        for cid in made:
            remove_probe(client, cid)
        if throwaway:
            try:
                client.remove_network(throwaway)
            except Exception:  # the engine busy: the label says whose it is
                time.sleep(1)
                try:
                    client.remove_network(throwaway)
                except Exception:
                    pass
    return Isolation(answer == "open", answer, ip, probed if not throwaway else network, throwaway is not None)


#: Run in the image: can it read a GPU (pynvml and the server side's NVML module), do its packages agree?
GPU_CODE = (
    "import json, subprocess, sys\n"
    "out = {'nvml': None, 'pip_check': None, 'pip_rc': None}\n"
    "try:\n"
    "    import pynvml, jupyterhub_gpu.gpus.nvml\n"
    "except Exception as e:\n"
    "    out['nvml'] = '%s: %s' % (type(e).__name__, e)\n"
    "    out['missing'] = getattr(e, 'name', None)\n"
    "r = subprocess.run([sys.executable, '-m', 'pip', 'check'], capture_output=True, text=True)\n"
    "out['pip_rc'] = r.returncode\n"
    "out['pip_check'] = (r.stdout + r.stderr).strip()[-2000:]\n"
    "if 'No module named pip' in out['pip_check']:\n"  # no pip (a venv without it): its check by the metadata
    "    import importlib.metadata as m, re\n"
    "    norm = lambda n: re.sub(r'[-_.]+', '-', (n or '').lower())\n"
    "    dists = list(m.distributions())\n"
    "    have = {norm(d.metadata['Name']) for d in dists}\n"
    "    lines = []\n"
    "    for d in dists:\n"
    "        for req in d.requires or []:\n"
    "            if ';' in req:\n"
    "                try:\n"
    "                    from packaging.requirements import Requirement\n"
    "                    marker = Requirement(req).marker\n"
    "                    if marker and not marker.evaluate({'extra': ''}):\n"
    "                        continue\n"
    "                except Exception:\n"
    "                    continue\n"
    "            name = norm(re.split(r'[ ;<>=!~\\[(]', req.strip(), maxsplit=1)[0])\n"
    "            if name not in have:\n"
    "                what = (d.metadata['Name'], d.version, name)\n"
    "                lines.append('%s %s requires %s, which is not installed.' % what)\n"
    "    out['pip_rc'] = 1 if lines else 0\n"
    "    out['pip_check'] = '\\n'.join(sorted(set(lines)))[-2000:]\n"
    "print(json.dumps(out))\n"
)
#: The distribution that holds a module the image lacks (the rest are named as their module is).
DISTRIBUTIONS = {"pynvml": "nvidia-ml-py", "jupyterhub_gpu": "jupyterhub-gpu"}


def image_gpu_probe(client, image: str, user: str = "", timeout: float = 120) -> dict:
    """``{"nvml": error or None, "missing": module, "pip_check": text, "pip_rc": status}`` read in the image."""
    status, out, _err = run_python(client, image, GPU_CODE, label="image-gpu-probe", user=user, timeout=timeout)
    try:
        found = json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        raise ProbeError(f"python3 -c exited with {status}: unreadable answer {out[-300:]!r}") from None
    return found


def missing_distribution(found: dict) -> str:
    """The package to install for the import that failed (``nvidia-ml-py`` for ``pynvml``)."""
    module = (found.get("missing") or "").split(".")[0]
    return DISTRIBUTIONS.get(module, module) or "nvidia-ml-py"
