"""The doctor's configuration checks, over config files written here and loaded as the hub loads them.

Nothing is started: these read configs (roles, scopes, currencies, profiles, inventories, service
settings). tests/doctor/ runs the doctor against real SMTP servers, ledgers, ports and Docker.
"""

from __future__ import annotations

import os
import socket
import sys
import textwrap

import pytest

from jupyterhub_gpu.doctor import channels, checks, databases
from jupyterhub_gpu.doctor.checks import port_problem, run_checks
from jupyterhub_gpu.doctor.loading import find_service, load_setup, service_arguments
from jupyterhub_gpu.doctor.results import FAIL, PASS, SKIP, WARN
from jupyterhub_gpu.spawners.assign import host
from tests.unit.gpus.test_inventory import A100_PARENT, fake_host

SCOPES = ["list:users", "read:users", "read:groups", "read:servers", "delete:servers", "start:servers"]


def base_config(tmp_path, extra: str = "") -> str:
    """A complete small hub: local servers, simulated GPUs, the gpu service, the reference's roles."""
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    return textwrap.dedent(
        f"""
        from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES
        c.JupyterHub.bind_url = "http://127.0.0.1:8000"
        c.JupyterHub.spawner_class = "gpu-local"
        c.GPULocalSpawner.gpu_backend = "simulated"
        c.GPULocalSpawner.simulated_gpus = [{{"model": "T4", "count": 2, "memory_gb": 16}}]
        c.GPULocalSpawner.currency = "CNY"
        c.GPULocalSpawner.budget_timezone = "Asia/Shanghai"
        c.GPULocalSpawner.ledger_db_url = {ledger!r}
        c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:10101/services/gpu/"
        c.GPULocalSpawner.profiles = [
            {{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00"}},
            {{"slug": "cpu", "gpu_count": 0, "price_per_hour": "0.60"}},
        ]
        c.JupyterHub.custom_scopes = CUSTOM_SCOPES
        c.JupyterHub.services = [
            {{
                "name": "gpu",
                "url": "http://127.0.0.1:10101",
                "command": [{sys.executable!r}, "-m", "jupyterhub_gpu.service", "--db-url={ledger}",
                            "--currency=CNY", "--timezone=Asia/Shanghai"],
                "oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES),
            }}
        ]
        c.JupyterHub.allow_named_servers = True
        c.JupyterHub.named_server_limit_per_user = 4
        c.JupyterHub.load_roles = [
            {{"name": "gpu-service", "services": ["gpu"], "scopes": {SCOPES!r}}},
            {{"name": "user", "scopes": ["self", "access:services!service=gpu"]}},
            {{"name": "gpu-admins", "users": ["admin"], "scopes": sorted(CUSTOM_SCOPES)}},
        ]
        """
    ) + textwrap.dedent(extra)


def doctor(tmp_path, extra: str = "", only=None, service_config: str | None = None):
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(base_config(tmp_path, extra))
    service = None
    if service_config is not None:
        service = tmp_path / "gpu_service_config.py"
        service.write_text(textwrap.dedent(service_config))
    setup = load_setup(str(path), str(service) if service else None, timeout=2)
    return run_checks(setup, only or checks.CHECKS)


def lines(results, check):
    return [r for r in results if r.check == check]


def one(results, check, status):
    found = [r for r in results if r.check == check and r.status == status]
    assert len(found) == 1, [(r.check, r.status, r.message) for r in results if r.check == check]
    return found[0]


def test_the_base_config_passes_its_configuration_checks(tmp_path):
    results = doctor(
        tmp_path,
        only=[checks.check_config, checks.check_service, checks.check_profiles, checks.check_roles,
              checks.check_named_servers, checks.check_currency, checks.check_ledger],
    )  # fmt: skip
    assert [(r.check, r.status) for r in results if r.status != PASS] == []
    assert "2 profiles" in one(results, "profiles", PASS).message


def test_the_simulated_inventory_is_a_warning_labelled_simulated(tmp_path):
    result = one(doctor(tmp_path, only=[checks.check_gpus]), "gpus", WARN)
    assert result.message.startswith("SIMULATED inventory, no real GPU: 0: Simulated T4 (16 GB)")
    assert 'gpu_backend = "nvml"' in result.fix


def test_a_static_inventory_passes_and_lists_its_gpus(tmp_path):
    extra = """
    c.GPULocalSpawner.gpu_backend = "static"
    c.GPULocalSpawner.static_gpus = [{"index": 0, "uuid": "GPU-1111", "name": "Tesla T4", "memory_gb": 16}]
    """
    result = one(doctor(tmp_path, extra, only=[checks.check_gpus]), "gpus", PASS)
    assert result.message == "1 GPU(s) from static: 0: Tesla T4 (16 GB)"


def test_nvml_lists_gpus_and_mig_instances_by_their_gpu(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_host())  # the driver boundary, as the inventory tests fake it
    monkeypatch.setattr(host, "_ALLOCATORS", {})  # the hub-wide inventory cache: this test's own
    result = one(doctor(tmp_path, 'c.GPULocalSpawner.gpu_backend = "nvml"\n', only=[checks.check_gpus]), "gpus", PASS)
    assert result.message.startswith("5 GPU(s) from nvml: 0: Tesla T4 (15 GB), 1: Tesla T4 (15 GB), 2: NVIDIA A100")
    assert "3:0: NVIDIA A100-SXM4-40GB MIG 1g.5gb (5 GB)" in result.message
    assert result.message.endswith(f"; MIG: {A100_PARENT} in 2 instances")


def test_nvml_without_a_driver_fails_with_the_static_fix(tmp_path):
    result = one(doctor(tmp_path, 'c.GPULocalSpawner.gpu_backend = "nvml"\n', only=[checks.check_gpus]), "gpus", FAIL)
    assert "NVML could not start" in result.message
    assert "NVIDIA driver" in result.fix and 'gpu_backend = "static"' in result.fix


def test_a_bad_price_fails_naming_the_profile_and_field(tmp_path):
    extra = 'c.GPULocalSpawner.profiles[0]["price_per_gpu_hour"] = "1.00001"\n'
    results = doctor(tmp_path, extra, only=[checks.check_profiles])
    result = one(results, "profiles", FAIL)
    assert "'t4'" in result.message and "price_per_gpu_hour" in result.message
    assert "jupyterhub_config.py" in result.fix


def test_more_gpus_than_the_host_has_fails_at_the_doctor_not_at_the_hubs_start(tmp_path):
    extra = 'c.GPULocalSpawner.profiles[0]["gpu_count"] = 3\n'
    result = one(doctor(tmp_path, extra, only=[checks.check_profiles]), "profiles", FAIL)
    assert "needs 3× 'T4' but this host has 2" in result.message


def test_the_service_role_without_start_servers_fails_naming_the_role_and_scope(tmp_path):
    extra = 'c.JupyterHub.load_roles[0]["scopes"].remove("start:servers")\n'
    result = one(doctor(tmp_path, extra, only=[checks.check_roles]), "roles", FAIL)
    assert "'gpu-service' lacks start:servers" in result.message and "notebook jobs" in result.message
    assert "'start:servers'" in result.fix and "load_roles" in result.fix


def test_a_wider_scope_counts_as_the_one_it_implies(tmp_path):
    extra = 'c.JupyterHub.load_roles[0]["scopes"] = ["admin:users", "admin:groups", "admin:servers"]\n'
    results = doctor(tmp_path, extra, only=[checks.check_roles])
    assert [r for r in results if r.status == FAIL] == []
    assert "'gpu-service' has list:users" in lines(results, "roles")[0].message


def test_scopes_the_service_does_not_use_are_a_warning(tmp_path):
    extra = 'c.JupyterHub.load_roles[0]["scopes"].append("admin:users")\n'
    result = one(doctor(tmp_path, extra, only=[checks.check_roles]), "roles", WARN)
    assert "also grants admin:users" in result.message and "least privilege" in result.fix


def test_a_service_without_url_fails(tmp_path):
    extra = 'del c.JupyterHub.services[0]["url"]\n'
    result = one(doctor(tmp_path, extra, only=[checks.check_service]), "service", FAIL)
    assert "has no url" in result.message and '"url"' in result.fix


def test_no_role_for_the_service_fails_with_the_whole_role(tmp_path):
    extra = "c.JupyterHub.load_roles = c.JupyterHub.load_roles[1:]\n"
    result = one(doctor(tmp_path, extra, only=[checks.check_roles]), "roles", FAIL)
    assert "names the gpu service" in result.message and '"services": ["gpu"]' in result.fix


def test_without_the_user_role_override_students_get_no_access(tmp_path):
    extra = "c.JupyterHub.load_roles = [r for r in c.JupyterHub.load_roles if r['name'] != 'user']\n"
    result = one(doctor(tmp_path, extra, only=[checks.check_roles]), "roles", FAIL)
    assert "You do not have permission to access JupyterHub service gpu" in result.message
    assert "access:services!service=gpu" in result.fix


def test_a_user_role_override_without_self_fails(tmp_path):
    extra = 'c.JupyterHub.load_roles[1]["scopes"] = ["access:services!service=gpu"]\n'
    result = one(doctor(tmp_path, extra, only=[checks.check_roles]), "roles", FAIL)
    assert "drops 'self'" in result.message


def test_a_held_custom_scope_missing_from_the_oauth_client_fails(tmp_path):
    extra = 'c.JupyterHub.services[0]["oauth_client_allowed_scopes"] = ["custom:gpu-metrics:read"]\n'
    results = doctor(tmp_path, extra, only=[checks.check_roles])
    failed = [r for r in results if r.check == "oauth" and r.status == FAIL]
    assert {r.message.split()[0] for r in failed} == {"custom:gpu-usage:read", "custom:gpu-budgets:write"}
    assert all("'gpu-admins'" in r.message and "oauth_client_allowed_scopes" in r.fix for r in failed)


def test_custom_scopes_not_defined_fail(tmp_path):
    result = one(doctor(tmp_path, "c.JupyterHub.custom_scopes = {}\n", only=[checks.check_roles]), "roles", FAIL)
    assert "custom_scopes does not define" in result.message and "CUSTOM_SCOPES" in result.fix


def test_no_one_holding_the_budget_scope_is_a_warning(tmp_path):
    extra = "c.JupyterHub.load_roles = c.JupyterHub.load_roles[:2]\n"
    result = one(doctor(tmp_path, extra, only=[checks.check_roles]), "oauth", WARN)
    assert "custom:gpu-budgets:write" in result.message


def test_jobs_without_named_servers_fail(tmp_path):
    result = one(
        doctor(tmp_path, "c.JupyterHub.allow_named_servers = False\n", only=[checks.check_named_servers]),
        "named-servers",
        FAIL,
    )
    assert "notebook job" in result.message and "allow_named_servers = True" in result.fix


def test_a_named_server_limit_under_the_jobs_is_a_warning(tmp_path):
    extra = "c.JupyterHub.named_server_limit_per_user = 1\n"
    result = one(doctor(tmp_path, extra, only=[checks.check_named_servers]), "named-servers", WARN)
    assert "under Jobs.max_concurrent 2" in result.message


def test_a_service_currency_differing_from_the_spawners_fails_naming_both(tmp_path):
    extra = """
    c.JupyterHub.services[0]["command"] = [
        a.replace("--currency=CNY", "--currency=USD") for a in c.JupyterHub.services[0]["command"]
    ]
    """
    result = one(doctor(tmp_path, extra, only=[checks.check_currency]), "currency", FAIL)
    assert "GPUService.currency is 'USD'" in result.message and "'CNY'" in result.message
    assert "c.GPULocalSpawner.currency" in result.message  # where the hub's value is set
    assert "drop --currency/--timezone" in result.fix


def test_a_service_time_zone_from_its_config_file_differing_fails(tmp_path):
    extra = """
    c.JupyterHub.services[0]["command"] = [
        a for a in c.JupyterHub.services[0]["command"] if not a.startswith("--timezone")
    ]
    """
    results = doctor(tmp_path, extra, only=[checks.check_currency], service_config='c.GPUService.timezone = "UTC"\n')
    result = one(results, "currency", FAIL)
    assert "GPUService.timezone is 'UTC'" in result.message and "'Asia/Shanghai'" in result.message


def test_a_service_that_sets_no_currency_takes_the_hubs(tmp_path):
    extra = """
    c.JupyterHub.services[0]["command"] = [
        a for a in c.JupyterHub.services[0]["command"] if not a.startswith(("--currency", "--timezone"))
    ]
    """
    result = one(doctor(tmp_path, extra, only=[checks.check_currency]), "currency", PASS)
    assert "CNY" in result.message and "Asia/Shanghai" in result.message


def test_the_command_line_wins_over_the_service_config_file_as_in_the_service(tmp_path):
    results = doctor(tmp_path, only=[checks.check_currency], service_config='c.GPUService.currency = "USD"\n')
    assert "CNY" in one(results, "currency", PASS).message


def test_a_ledger_url_differing_between_spawner_and_service_fails(tmp_path):
    extra = f'c.GPULocalSpawner.ledger_db_url = "sqlite:///{tmp_path / "other.sqlite"}"\n'
    result = one(doctor(tmp_path, extra, only=[checks.check_ledger]), "ledger", FAIL)
    assert "other.sqlite" in result.message and "ledger.sqlite" in result.message
    assert "--db-url=" in result.fix


def test_the_servers_service_url_names_the_service(tmp_path):
    run = [checks.check_service_url]
    assert one(doctor(tmp_path, only=run), "service-url", PASS)
    through_proxy = 'c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:8000/services/gpu/"\n'
    assert one(doctor(tmp_path, through_proxy, only=run), "service-url", PASS)
    empty = one(doctor(tmp_path, 'c.GPULocalSpawner.gpu_service_url = ""\n', only=run), "service-url", WARN)
    assert "is empty" in empty.message and "http://127.0.0.1:10101/services/gpu/" in empty.fix
    wrong = 'c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:10102/services/gpu/"\n'
    result = one(doctor(tmp_path, wrong, only=run), "service-url", WARN)
    assert "10102" in result.message and "http://127.0.0.1:10101/services/gpu/" in result.fix


def test_a_missing_service_config_named_by_the_command_fails(tmp_path):
    extra = f'c.JupyterHub.services[0]["command"].append("--config={tmp_path / "nope.py"}")\n'
    result = one(doctor(tmp_path, extra, only=[checks.check_service]), "service", FAIL)
    assert "nope.py: no such file" in result.message  # the service's own loader says it


def test_a_refused_service_setting_fails_the_service_and_skips_what_needs_it(tmp_path):
    results = doctor(
        tmp_path,
        only=[checks.check_service, checks.check_currency],
        service_config="c.GPUService.alert_thresholds = [150]\n",
    )
    result = one(results, "service", FAIL)
    assert "alert_thresholds" in result.message
    assert one(results, "currency", SKIP).message.startswith("the gpu service's settings did not load")


def test_no_gpu_service_fails(tmp_path):
    results = doctor(tmp_path, "c.JupyterHub.services = []\n", only=[checks.check_service])
    assert "no gpu service" in one(results, "service", FAIL).message


def test_a_hub_config_that_raises_fails_and_the_rest_is_skipped(tmp_path):
    results = doctor(tmp_path, "raise RuntimeError('typo in the config')\n")
    assert "typo in the config" in one(results, "config", FAIL).message
    assert {r.status for r in results if r.check != "config"} == {SKIP}


def test_a_non_gpu_spawner_fails_the_config_check(tmp_path):
    results = doctor(tmp_path, 'c.JupyterHub.spawner_class = "simple"\n', only=[checks.check_config])
    assert 'spawner_class = "gpu-docker"' in one(results, "config", FAIL).fix


def test_the_hubs_own_files_need_their_folders_and_tls_files(tmp_path):
    extra = f"""
    c.JupyterHub.db_url = "sqlite:///{tmp_path / "nowhere" / "jupyterhub.sqlite"}"
    c.JupyterHub.cookie_secret_file = "{tmp_path / "cookie_secret"}"
    c.JupyterHub.ssl_cert = "{tmp_path / "missing.crt"}"
    """
    results = lines(doctor(tmp_path, extra, only=[checks.check_hub_files]), "hub-files")
    assert [(r.status, r.message.split(":")[0]) for r in results] == [
        (FAIL, "c.JupyterHub.db_url"),
        (PASS, "c.JupyterHub.cookie_secret_file"),
        (FAIL, "c.JupyterHub.ssl_cert"),
    ]
    assert f"mkdir -p {tmp_path / 'nowhere'}" in results[0].fix


def test_the_local_spawner_skips_the_docker_checks_with_a_note(tmp_path):
    results = doctor(tmp_path, only=[checks.check_docker, checks.check_images])
    assert [(r.check, r.status) for r in results] == [("docker", SKIP), ("images", SKIP)]
    assert all("runs no Docker containers" in r.message for r in results)


def test_the_kubernetes_spawner_checks_its_profiles_and_skips_the_host_checks(tmp_path):
    extra = """
    c.JupyterHub.spawner_class = "gpu-kube"
    c.GPUKubeSpawner.currency = "CNY"
    c.GPUKubeSpawner.budget_timezone = "Asia/Shanghai"
    c.GPUKubeSpawner.ledger_db_url = c.GPULocalSpawner.ledger_db_url
    c.GPUKubeSpawner.gpu_node_products = {"T4": ["Tesla-T4"], "V100": ["Tesla-V100"]}
    c.GPUKubeSpawner.profiles = [
        {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": "img:1", "price_per_gpu_hour": "3.00"},
    ]
    """
    only = [checks.check_profiles, checks.check_gpus, checks.check_limits, checks.check_docker, checks.check_currency]
    results = doctor(tmp_path, extra, only=only)
    assert [(r.check, r.status) for r in results] == [
        ("profiles", FAIL),
        ("gpus", SKIP),
        ("limits", SKIP),
        ("docker", SKIP),
        ("currency", PASS),
    ]
    assert "'V100', which no GPU profile uses" in results[0].message  # the Kubernetes spawner's own check
    assert "GPUKubeSpawner runs no Docker containers" in results[3].message


def test_a_profile_limit_above_this_machine_is_a_warning(tmp_path):
    cpus = len(os.sched_getaffinity(0))
    extra = f'c.GPULocalSpawner.profiles[0]["cpu_limit"] = {cpus + 1}\n'
    results = doctor(tmp_path, extra, only=[checks.check_limits])
    result = one(results, "limits", WARN)
    assert f"profile 't4': cpu_limit {cpus + 1} is more than the {cpus} CPUs of this host" in result.message
    assert one(doctor(tmp_path, only=[checks.check_limits]), "limits", PASS)


def test_find_service_and_its_arguments():
    ours = {"name": "gpu", "command": ["/py", "-m", "jupyterhub_gpu.service", "--currency=CNY"]}
    other = {"name": "cull", "command": ["/py", "-m", "jupyterhub_idle_culler"]}
    assert find_service([other, ours]) is ours
    assert find_service([other, dict(ours, name="billing")])["name"] == "billing"
    assert find_service([other]) is None
    assert service_arguments(ours) == ["--currency=CNY"]
    assert service_arguments(other) is None


def test_where_each_configured_channel_connects(tmp_path):
    service_config = """
    c.GPUService.smtp_host = "mail.example.edu"
    c.GPUService.smtp_port = 587
    c.GPUService.smtp_starttls = True
    c.GPUService.mail_from = "gpu@example.edu"
    c.GPUService.notify_admin_urls = ["json://hooks.example.edu:8443/gpu", "tgram://123456789:ABCdef/12345"]
    c.GPUService.notify_user_url_template = "mailtos://smtp.example.edu?from=gpu@example.edu&to={username}@example.edu"
    """
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(base_config(tmp_path))
    (tmp_path / "gpu.py").write_text(textwrap.dedent(service_config))
    setup = load_setup(str(path), str(tmp_path / "gpu.py"))
    found = [channels.endpoint(c) for c in channels.alert_settings(setup.service).apprise_channels()]
    assert [(e.kind, e.host, e.port, e.tls) for e in found] == [
        ("tcp", "hooks.example.edu", 8443, ""),
        ("tcp", "api.telegram.org", 443, ""),
        ("smtp", "smtp.example.edu", 587, "starttls"),
        ("smtp", "mail.example.edu", 587, "starttls"),
    ]
    assert "(every user's)" in found[2].label
    assert not any("ABCdef" in e.label for e in found)  # the bot's token is a secret


def test_port_problem_sees_a_bound_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert port_problem("127.0.0.1", port) is not None
    assert port_problem("127.0.0.1", port) is None


@pytest.mark.parametrize("url", ["sqlite:///x.sqlite", "sqlite:///./x.sqlite"])
def test_same_sqlite_database_by_path(tmp_path, url):
    assert databases.same_database(url, f"sqlite:///{tmp_path / 'x.sqlite'}", tmp_path)
    assert not databases.same_database(url, f"sqlite:///{tmp_path / 'y.sqlite'}", tmp_path)


def test_a_missing_spawner_ledger_url_names_the_services_url_without_its_password(tmp_path):
    extra = """
    c.GPULocalSpawner.ledger_db_url = ""
    c.JupyterHub.services[0]["command"][3] = "--db-url=postgresql://gpu:S3cretPass@db.internal/ledger"
    """
    result = one(doctor(tmp_path, extra, only=[checks.check_ledger]), "ledger", FAIL)
    assert "ledger_db_url is not set" in result.message
    assert "db.internal/ledger" in result.fix and "S3cretPass" not in result.fix + result.message
