"""GPUDockerSpawner: GPU profiles over DockerSpawner, one hardened container per session.

The container holds exactly its assigned GPUs (a Docker device request naming
their UUIDs: a MIG slice's own, a time-sliced share's physical GPU, whose memory
cap the environment carries for the kernels, see :mod:`jupyterhub_gpu.serverext.memcap`),
mounts its owner's named volume at ``/home/jovyan/work`` and the shared datasets
read-only, runs as a non-root user with every capability dropped and
no-new-privileges, within the profile's memory, CPU and process limits. The
container arguments come from the pure builder in :mod:`.objects`.

Servers run on a Docker bridge network with inter-container communication
disabled (``jupyterhub-gpu`` by default): the hub reaches each server, each server
reaches the hub and the gpu service on the network's gateway, and no server
reaches another's Jupyter port, kernels or TensorBoard. A spawn on a network that
does not isolate is refused; host networking (one loopback shared by every
server) is possible, with a warning in the log at every start.
"""

from __future__ import annotations

import asyncio
import inspect
import time

from dockerspawner import DockerSpawner
from jupyterhub.utils import random_port
from traitlets import Bool, Float, Int, Unicode, default, validate

from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.spawners.docker.engine import (  # noqa: F401 (network_problem, loopback_problems: the doctor's)
    GPU_RUNTIME_FIX,
    GPU_RUNTIME_MESSAGE,
    MISSING_IMAGE_MESSAGE,
    docker_time,
    ensure_isolated_network,
    is_gpu_driver_error,
    loopback_problems,
    missing_images,
    network_problem,
    report_engine_at_start,
    report_missing_image,
    report_once,
)
from jupyterhub_gpu.spawners.docker.objects import (
    LABEL_PREFIX,
    make_container_spec,
    make_labels,
    make_volume_binds,
    network_gateway,
    parse_container_user,
    parse_subnet,
    screen_extras,
    visible_device_ids,
)
from jupyterhub_gpu.spawners.docker.pull import (
    prepull_order,
    pull_phrase,
    running_pull,
    shared_pull,
    start_prepull,
)
from jupyterhub_gpu.spawners.messages import Phrase, shown
from jupyterhub_gpu.spawners.mixin import GPUSpawnerMixin
from jupyterhub_gpu.spawners.profiles import parse_profiles
from jupyterhub_gpu.spawners.startup import check_config, config_probe

HOST_NETWORK_WARNING = (
    "INSECURE: %s runs on the host network: every server shares the host's loopback, so any user can"
    " connect to every other user's Jupyter port, kernels (and read their code and outputs) and"
    " TensorBoard. Use host networking only on a single-user machine; see docs/admin.md, Networking."
)


#: Seconds between two progress events of a spawn waiting on its image's pull.
PULL_EVENT_INTERVAL = 1.0


def prepulls(probe) -> bool:
    """Whether the hub pre-pulls the profiles' images at its start (``prepull_images``, ``pull_policy``)."""
    return (
        bool(probe.prepull_images)
        and not callable(probe.profiles)
        and probe.pull_policy.lower()
        not in (
            "never",
            "skip",
        )
    )


class GPUDockerSpawner(GPUSpawnerMixin, DockerSpawner):
    """One hardened Docker container per session holding exactly its assigned GPUs."""

    work_volume_template = Unicode(
        "jupyterhub-gpu-user-{username}",
        help="""
        Name of each user's persistent named volume, mounted at ``work_dir``.
        ``{username}`` is the escaped user name.

            c.GPUDockerSpawner.work_volume_template = "lab-home-{username}"
        """,
    ).tag(config=True)

    work_dir = Unicode(
        "/home/jovyan/work",
        help="""
        Where the user's volume is mounted in the container.

            c.GPUDockerSpawner.work_dir = "/home/jovyan/work"
        """,
    ).tag(config=True)

    datasets_volume = Unicode(
        "",
        help="""
        A named volume or host path with shared datasets, mounted read-only at
        ``datasets_dir``; empty for none.

            c.GPUDockerSpawner.datasets_volume = "/srv/datasets"
        """,
    ).tag(config=True)

    datasets_dir = Unicode(
        "/home/jovyan/datasets",
        help="""
        Where the shared datasets are mounted (read-only).

            c.GPUDockerSpawner.datasets_dir = "/home/jovyan/datasets"
        """,
    ).tag(config=True)

    container_user = Unicode(
        "1000:100",
        help="""
        Numeric ``uid:gid`` the server runs as inside the container; both must be
        above 0 (root, uid or gid 0, is refused whatever its spelling, e.g. ``"000:100"``).

            c.GPUDockerSpawner.container_user = "1000:100"
        """,
    ).tag(config=True)

    network_subnet = Unicode(
        "",
        help="""
        The subnet of the isolated network (``network_name``): the hub creates the
        network with it at startup if it is missing (its gateway, the first address,
        is where the hub and the gpu service listen), and refuses an existing one
        with another subnet. Empty lets Docker choose (then set ``hub_ip`` and the
        service's URL to the gateway Docker chose).

            c.GPUDockerSpawner.network_subnet = "10.213.0.0/24"
        """,
    ).tag(config=True)

    network_internal = Bool(
        True,
        help="""
        Whether the network the spawner creates is ``internal``: servers reach only
        the host (the hub and the gpu service), not the internet. Set False to let
        them reach the internet (pip install); they still cannot reach each other.

            c.GPUDockerSpawner.network_internal = False
        """,
    ).tag(config=True)

    allow_shared_network = Bool(
        False,
        help="""
        INSECURE. Start servers on a Docker network that does not isolate them from
        each other (not a bridge, or a bridge with inter-container communication
        enabled, like Docker's default ``bridge``). By default such a spawn is
        refused. Host networking (``network_name = "host"``) is always possible,
        with a warning in the log: it too lets servers reach each other.

            c.GPUDockerSpawner.allow_shared_network = True
        """,
    ).tag(config=True)

    pids_limit = Int(
        1024,
        help="""
        Maximum number of processes in a container.

            c.GPUDockerSpawner.pids_limit = 2048
        """,
    ).tag(config=True)

    omit_device_requests = Bool(
        False,
        help="""
        TEST ONLY. Leave the GPU device request out of the container actually
        created (for hosts without the NVIDIA container runtime, where Docker
        refuses it) and record the exact request that would have been sent in the
        container label ``jupyterhub-gpu.device-requests``. Never set this on a
        real GPU host: the container would see no GPU.

            c.GPUDockerSpawner.omit_device_requests = True
        """,
    ).tag(config=True)

    prepull_images = Bool(
        True,
        help="""
        At the hub's start, check every profile's image on the Docker host and pull
        those that are missing, in the background (the hub does not wait): the hub's
        log says of each "present", "pulled in N s" or "pull failed" with the
        registry's error. A spawn of an image still being pulled waits for that same
        pull, showing its layers and bytes. Not done with ``pull_policy`` "never" or
        "skip", nor for profiles given as a callable (their images are known only at
        spawn). False: no pull at start; a spawn still pulls a missing image.

            c.GPUDockerSpawner.prepull_images = False
        """,
    ).tag(config=True)

    image_pull_timeout = Float(
        1800,
        help="""
        Seconds a spawn waits for its image's pull before it fails with a message
        (the pull goes on, for the next spawn). The wait comes before the queue and
        before the hub's ``start_timeout`` starts counting: no GPU is held and nothing
        is billed while an image is pulled.

            c.GPUDockerSpawner.image_pull_timeout = 3600
        """,
    ).tag(config=True)

    @validate("image_pull_timeout")
    def _valid_image_pull_timeout(self, proposal):
        if not 0 < proposal.value <= 24 * 3600:
            raise ValueError(f"image_pull_timeout must be between 0 and one day in seconds, got {proposal.value}")
        return proposal.value

    @validate("container_user")
    def _valid_container_user(self, proposal):
        uid, gid = parse_container_user(proposal.value)  # ValueError: a clear message at hub start
        return f"{uid}:{gid}"

    @validate("network_subnet")
    def _valid_network_subnet(self, proposal):
        return str(parse_subnet(proposal.value)) if proposal.value else ""

    @default("network_name")
    def _default_network_name(self):
        # servers isolated from each other (see ensure_isolated_network), never Docker's default bridge
        return "jupyterhub-gpu"

    @validate("pids_limit")
    def _valid_pids_limit(self, proposal):
        if proposal.value < 16:
            raise ValueError(f"pids_limit must be at least 16, got {proposal.value}")
        return proposal.value

    @default("remove")
    def _default_remove(self):
        # a fresh container per session: the GPU assignment differs each time
        return True

    @validate("remove")
    def _valid_remove(self, proposal):
        if not proposal.value:
            # DockerSpawner would start the user's earlier container again: its environment, labels and
            # device request still name the earlier session's GPUs, session id and rate, and its
            # State.FinishedAt is the earlier run's exit
            raise ValueError("GPUDockerSpawner.remove must stay True: each session needs a fresh container")
        return proposal.value

    @property
    def work_volume(self) -> str:
        return self.work_volume_template.format(username=self.escaped_name)

    async def gpu_prepare(self, profile, devices):
        await self.gpu_check_image(profile)
        self.image = profile.image
        if self.network_name == "host":
            self.log.warning(HOST_NETWORK_WARNING, self._log_name)
            # every host-network server needs its own port on the host
            self.port = random_port()
            if self.ip in ("", "0.0.0.0"):
                self.ip = "127.0.0.1"
        else:
            await self.gpu_check_network()

    async def gpu_before_queue(self, profile):
        await self.gpu_ensure_image(profile.image)

    async def gpu_ensure_image(self, image: str) -> None:
        """Have the image on the host before the spawn queues for GPUs, as ``pull_policy`` says.

        "ifnotpresent" (the default) pulls a missing image, "always" pulls it anyway (a failed pull of an
        image that is there starts that one, with a warning), "never" refuses a missing one, "skip" checks
        nothing. A pull of the image under way (the start-up pre-pull, another spawn) is joined, never
        started twice; its progress is shown in the spawn's language.
        """
        policy = self.pull_policy.lower()
        if policy == "skip":
            return
        if policy != "always" and not await self._gpu_image_missing(image):
            return
        if policy == "never":
            raise await self._gpu_missing_image_refusal(image)
        pull = running_pull(self.client, image)
        if pull is None:
            pull = shared_pull(self.client, image, self.log)
        else:
            self.log.info("%s waits for the pull of %s under way", self._log_name, image)
        error = await self._gpu_wait_for_pull(pull)
        if error is None:
            self._gpu_say(50, Phrase("Pulled image {image}", image=image))
            return
        if policy == "always" and not await self._gpu_image_missing(image):
            self.log.warning(
                "Could not pull %s for %s (%s); starting the image on this host", image, self._log_name, error
            )
            return
        report_missing_image(self.log, image, await self.gpu_profiles())
        raise self.gpu_refusal(
            Phrase("Could not pull the image {image}: {error}", image=image, error=shown(error, 300)),
            reason="image_pull",
            log_message=f"{self._log_name}: could not pull the image {image!r}: {error}",
            status_code=503,
        )

    async def _gpu_wait_for_pull(self, pull) -> str | None:
        """Wait for ``pull`` to end, showing its progress at most once a second; its error, or None."""
        deadline = time.monotonic() + self.image_pull_timeout
        shown_text, shown_at = None, 0.0
        while not pull.finished.done():
            if self._gpu_abort:
                raise self._gpu_stopped_while_starting()
            now = time.monotonic()
            if now >= deadline:
                raise self.gpu_refusal(
                    Phrase(
                        "The image {image} is still being pulled after {minutes} minutes; try again later.",
                        image=pull.image,
                        minutes=round(self.image_pull_timeout / 60),
                    ),
                    reason="image_pull_timeout",
                    status_code=503,
                )
            phrase = pull_phrase(pull.image, pull.progress)
            if str(phrase) != shown_text and now - shown_at >= PULL_EVENT_INTERVAL:
                # no log line each time: the hub's log has the pull's start and end
                self._gpu_emit({"progress": 50, "message": phrase(self._gpu_lang)})
                shown_text, shown_at = str(phrase), now
            await pull.changed(timeout=min(PULL_EVENT_INTERVAL, deadline - now))
        if self._gpu_abort:
            raise self._gpu_stopped_while_starting()
        return pull.error

    async def _gpu_image_missing(self, image: str) -> bool:
        return bool(await asyncio.wrap_future(self.executor.submit(missing_images, self.client, [image])))

    async def _gpu_missing_image_refusal(self, image: str):
        report_missing_image(self.log, image, await self.gpu_profiles())
        return self.gpu_refusal(
            Phrase(MISSING_IMAGE_MESSAGE),
            reason="image_missing",
            log_message=f"{self._log_name}: image {image!r} is not on this Docker host (docker pull {image})",
            status_code=503,
        )

    async def pull_image(self, image):
        """DockerSpawner's pull step, inside ``start()``: the image was pulled before the queue, so only check it.

        Pulling here would hold the GPUs (and bill them) and count against ``start_timeout`` for the whole
        pull; :meth:`gpu_ensure_image` did it in the pre-spawn hook. An image removed since fails clearly.
        """
        if self.pull_policy.lower() != "skip" and await self._gpu_image_missing(image):
            raise await self._gpu_missing_image_refusal(image)

    async def gpu_check_network(self) -> None:
        """Refuse to start on a network where servers could reach each other; create the default one."""
        try:
            await asyncio.wrap_future(
                self.executor.submit(
                    ensure_isolated_network,
                    self.client,
                    self.network_name,
                    self.network_subnet,
                    internal=self.network_internal,
                )
            )
        except ValueError as e:
            if self.allow_shared_network:
                self.log.warning("INSECURE (allow_shared_network): %s: %s", self._log_name, e)
                return
            raise self.gpu_refusal(
                Phrase("The lab's container network is not set up safely; please tell your administrator."),
                reason="network",
                log_message=f"refusing to start {self._log_name}: {e} (docs/admin.md, Networking)",
                status_code=500,
            ) from None

    @classmethod
    def gpu_check_config(cls, config) -> list[str]:
        """The hub's startup check, and the isolated network made before the hub listens on its gateway.

        JupyterHub runs this before it binds its own port: with ``hub_ip`` on the network's
        gateway (the reference config), the network must exist by then.
        """
        problems = check_config(config, cls)
        if problems:
            return problems
        probe = config_probe(config, cls)
        if not prepulls(probe):  # else the pre-pull says of each image whether it is there
            cls.gpu_report_missing_images(probe)
        if not callable(probe.profiles):  # iptables off, no NVIDIA runtime: an error line each, once
            report_engine_at_start(probe, parse_profiles(probe.profiles))
        if probe.network_name == "host":
            return []
        try:
            info = ensure_isolated_network(
                probe.client, probe.network_name, probe.network_subnet, internal=probe.network_internal
            )
        except ValueError as e:
            if not probe.allow_shared_network:
                problems.append(f"{cls.__name__}: {e} (docs/admin.md, Networking)")
            return problems
        except Exception as e:
            problems.append(f"{cls.__name__}: cannot check the Docker network {probe.network_name!r}: {e}")
            return problems
        return problems + loopback_problems(config, probe, network_gateway(info))

    @classmethod
    def gpu_host_resources(cls, probe) -> tuple[float, int, str]:
        """The CPUs, memory (bytes) and name of the Docker engine's host, for the start-up limits check."""
        info = probe.client.info()
        return float(info["NCPU"]), int(info["MemTotal"]), f"the Docker host {info.get('Name') or ''}".rstrip()

    @classmethod
    def gpu_report_missing_images(cls, probe) -> None:
        """Log, at the hub's start, each profile's image that is not on the host (it fails only its spawns)."""
        if callable(probe.profiles):
            return  # known at spawn time only
        profiles = parse_profiles(probe.profiles, currency=Currency.from_config(probe.currency, probe.currency_symbol))
        try:
            missing = missing_images(probe.client, [p.image for p in profiles])
        except Exception as e:  # the engine unreachable: the network check says so, and stops the hub
            probe.log.warning("jupyterhub-gpu: cannot check the profiles' images: %s", e)
            return
        for image in missing:
            report_missing_image(probe.log, image, profiles)

    @classmethod
    def gpu_prepull(cls, probe):
        """At the hub's start: check every profile's image and pull the missing ones, in the background."""
        if not prepulls(probe):
            if probe.prepull_images:
                probe.log.info(
                    "jupyterhub-gpu: no image pre-pull (pull_policy %s, or profiles a callable)", probe.pull_policy
                )
            return None
        profiles = parse_profiles(probe.profiles, currency=Currency.from_config(probe.currency, probe.currency_symbol))
        client = probe.client
        return start_prepull(
            client,
            prepull_order(profiles),
            probe.log,
            lambda image: bool(missing_images(client, [image])),
            lambda image, error: report_missing_image(probe.log, image, profiles),
        )

    async def create_object(self):
        """Create the container from the pure builder's arguments."""
        profile = self._gpu_profile
        session = self._gpu_session
        extra_create = self._eval_if_callable(self.extra_create_kwargs)
        if inspect.isawaitable(extra_create):
            extra_create = await extra_create
        extra_host = self._eval_if_callable(self.extra_host_config)
        if inspect.isawaitable(extra_host):
            extra_host = await extra_host
        extra_create, extra_host = self._render_templates(extra_create), self._render_templates(extra_host)
        for dropped in screen_extras(extra_create, extra_host)[2]:
            self.log.warning("Ignoring %s for %s: it would weaken the container's isolation", dropped, self._log_name)
        create, host = make_container_spec(
            name=self.container_name,
            image=self.image,
            command=await self.get_command(),
            env=self.get_env(),
            labels=make_labels(
                user=self.user.name,
                server_name=self.name,
                profile_slug=profile.slug,
                session_id=session.id,
                device_uuids=list(session.gpus),
            ),
            container_user=self.container_user,
            port=self.port,
            network_mode=self.network_name,
            binds=make_volume_binds(
                work_volume=self.work_volume,
                work_dir=self.work_dir,
                datasets_volume=self.datasets_volume or None,
                datasets_dir=self.datasets_dir,
            ),
            # a share's physical GPU (two shares of one GPU: the same GPU in both containers), a MIG slice's own
            device_uuids=visible_device_ids(list(session.gpus)),
            gpu_backend=self.gpu_backend,
            include_device_requests=not self.omit_device_requests,
            mem_limit=profile.mem_limit,
            cpu_limit=profile.cpu_limit,
            pids_limit=self.pids_limit,
            extra_create=extra_create,
            extra_host=extra_host,
            # on an isolated network the hub reaches the server at its address there: publish nothing
            publish_port=not self.use_internal_ip,
        )
        self.container_spec = (create, host)
        create["host_config"] = self.client.create_host_config(**host)
        return await self.docker("create_container", **create)

    async def start_object(self):
        """``docker start``; an engine without the NVIDIA runtime refuses the GPU request: the student is told."""
        try:
            await super().start_object()
        except Exception as e:
            if not is_gpu_driver_error(e):
                raise
            report_once(self.log, f"GPU containers cannot start: {e} — fix: {GPU_RUNTIME_FIX}")
            raise self.gpu_refusal(
                Phrase(GPU_RUNTIME_MESSAGE),
                reason="gpu_runtime",
                log_message=f"{self._log_name}: the Docker engine has no NVIDIA runtime ({e}); fix: {GPU_RUNTIME_FIX}",
                status_code=503,
            ) from None

    async def get_ip_and_port(self):
        if self.network_name == "host":
            return self.ip, self.port
        return await super().get_ip_and_port()

    async def gpu_stopped_at(self):
        """The container's real end (``State.FinishedAt``), for a server that ended on its own."""
        if not self.object_id:
            return None
        try:
            info = await self.docker("inspect_container", self.object_id)
        except Exception:
            return None
        state = info.get("State") or {}
        if state.get("Running"):
            return None  # FinishedAt is then an earlier run's end, never this session's
        finished = docker_time(state.get("FinishedAt"))
        started = docker_time(state.get("StartedAt"))
        if finished is None or (started is not None and finished < started):
            return None
        return finished

    @classmethod
    def gpu_orphans(cls, probe, api_url):
        """Running containers of this hub: labelled by jupyterhub-gpu, with its API URL in their environment."""
        client = probe.client
        found = []
        for c in client.containers(filters={"label": f"{LABEL_PREFIX}.managed=true"}):
            try:
                env = client.inspect_container(c["Id"])["Config"].get("Env") or []
            except Exception:
                continue  # gone since the listing
            if f"JUPYTERHUB_API_URL={api_url}" in env:
                session = (c.get("Labels") or {}).get(f"{LABEL_PREFIX}.session-id", "")
                facts = dict(item.split("=", 1) for item in env if "=" in item)
                found.append((session, f"container {c['Id'][:12]} {c.get('Names')}", c["Id"], facts))
        return found

    @classmethod
    def gpu_reap(cls, probe, container_id):
        probe.client.remove_container(container_id, force=True)

    async def poll(self):
        status = await super().poll()  # records the stop at State.FinishedAt first
        if status is not None and self.remove and self.object_id and not self._gpu_stopping:
            # a server that ended on its own is only polled, never stopped: without this its exited
            # container (and its labels) would stay on the host until the user's next start
            try:
                await self.remove_object()
            except Exception as e:
                self.log.warning("Could not remove the exited container of %s: %s", self._log_name, e)
        return status

    async def stop(self, now=False):
        # a container that is already gone (removed by hand, host restart) is stopped
        try:
            return await super().stop(now=now)
        except Exception as e:
            if getattr(getattr(e, "response", None), "status_code", None) == 404:
                self.log.warning("Container of %s was already gone", self._log_name)
                self.object_id = ""
                self.clear_state()
                return
            raise
