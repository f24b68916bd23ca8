"""An orphan's session from its environment: the group that pays only if the hub knows the user in it now.

gpu-local reads the environment of any process a user started, which the user can write: no group may be
charged on an environment's word.
"""

from jupyterhub_gpu import env as names
from jupyterhub_gpu.spawners.startup import orphan_start


def orphan_env(pool: str) -> dict[str, str]:
    return {
        "JUPYTERHUB_USER": "mallory",
        "JUPYTERHUB_SERVER_NAME": "",
        names.SESSION_ID: "orphan-1",
        names.PROFILE: "t4",
        names.STARTED: "2026-12-07T09:00:00+00:00",
        names.RATE_PER_MINUTE: "0.50",
        names.CURRENCY: "CNY",
        names.POOL: pool,
    }


def test_a_pool_the_user_is_not_in_is_not_charged():
    start = orphan_start(orphan_env("physics-dept"), ["cs101"])
    assert start is not None and start.pool is None
    assert start.groups == ("cs101",)
    assert start.pool_name() != "physics-dept"


def test_the_user_s_own_group_pays_as_the_environment_says():
    start = orphan_start(orphan_env("thesis"), ["cs101", "thesis"])
    assert start is not None and start.pool == "thesis" and start.pool_name() == "thesis"
