"""The documentation site's generated references (docs/_ext/gpu_docs.py) cover every option and every endpoint.

`make docs` (part of `make test`) builds the whole site with warnings as errors; these tests check what the
generators put on the pages, without a Sphinx build.
"""

from __future__ import annotations

import inspect
import re
import sys

import pytest
import yaml
from sphinx.errors import ExtensionError

from jupyterhub_gpu.service.app import GPUService
from jupyterhub_gpu.service.kueue.settings import Kueue
from jupyterhub_gpu.service.settings import SETTINGS_CLASSES
from jupyterhub_gpu.spawners.docker.spawner import GPUDockerSpawner
from jupyterhub_gpu.spawners.kube.kueue_mode import KueueMode
from jupyterhub_gpu.spawners.kube.spawner import GPUKubeSpawner
from jupyterhub_gpu.spawners.local import GPULocalSpawner
from jupyterhub_gpu.spawners.mixin import GPUSpawnerMixin
from tests.docs.docs_text import ROOT

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import gpu_docs  # the site's extension lives in docs/_ext, put on the path above

SPEC = yaml.safe_load((ROOT / "jupyterhub_gpu" / "service" / "web" / "openapi.yaml").read_text())
CONFIG_PAGE = ROOT / "docs" / "reference" / "configuration.md"
SHARED = ["GPUDockerSpawner", "GPUKubeSpawner", "GPULocalSpawner"]


def page_blocks() -> dict[str, dict[str, str]]:
    """The configuration page's ``{gpu-options}`` blocks: class path -> options."""
    text = CONFIG_PAGE.read_text()
    return {m.group("target"): gpu_docs._options(m.group("options")) for m in gpu_docs._BLOCK.finditer(text)}


def test_the_configuration_page_documents_the_spawners_and_the_service():
    blocks = page_blocks()
    assert {gpu_docs.load(target) for target in blocks} == {
        GPUSpawnerMixin,
        GPUDockerSpawner,
        GPUKubeSpawner,
        GPULocalSpawner,
        GPUService,
        *SETTINGS_CLASSES,  # the service's settings by concern (c.Budgets, c.Notify, ...)
        KueueMode,  # GPUKubeSpawner's Kueue mode, set on GPUKubeSpawner
        Kueue,  # c.Kueue, beside the code it configures (service/kueue/)
    }
    # the mixin's options are set through the three spawners, and the entry points name exactly those
    assert blocks["jupyterhub_gpu.spawners.mixin.GPUSpawnerMixin"]["shared"].replace(" ", "").split(",") == SHARED


@pytest.mark.parametrize(
    "cls",
    [
        GPUSpawnerMixin,
        GPUDockerSpawner,
        GPUKubeSpawner,
        KueueMode,
        GPULocalSpawner,
        GPUService,
        *SETTINGS_CLASSES,
        Kueue,
    ],
)
def test_every_own_option_is_there_with_its_type_default_and_help(cls):
    shared = SHARED if cls is GPUSpawnerMixin else []
    markdown = gpu_docs.options_markdown(cls, 3, shared)
    own = cls.class_own_traits(config=True)
    headings = re.findall(r"^### `([\w.]+)`$", markdown, re.M)
    assert headings == [name if shared else f"{cls.__name__}.{name}" for name in sorted(own)]
    sections = re.split(r"^### ", markdown, flags=re.M)[1:]
    for name, section in zip(sorted(own), sections, strict=False):
        trait = own[name]
        assert f"`c.{(shared or [cls.__name__])[0]}.{name}`" in section
        assert trait.default_value_repr() in section, f"{cls.__name__}.{name}: its default"
        kinds = [type(t).__name__ for t in getattr(trait, "trait_types", [trait])]
        values = getattr(trait, "values", None)  # an enum shows its values
        shown = [repr(v) for v in values] if values else kinds
        assert all(f"`{kind}`" in section for kind in shown), f"{cls.__name__}.{name}: its type"
        for line in inspect.cleandoc(trait.help).splitlines():
            assert line in section, f"{cls.__name__}.{name}: its help"


def test_a_class_without_options_of_its_own_says_so():
    assert "`GPULocalSpawner` declares no options of its own." in gpu_docs.options_markdown(GPULocalSpawner, 3, [])


@pytest.mark.parametrize("cls", [GPUDockerSpawner, GPULocalSpawner])
def test_the_defaults_a_spawner_changes_are_the_ones_it_has(cls):
    """Each constant default in the table is what a spawner of that class really gets."""
    spawner = cls()
    changes = gpu_docs.own_default_changes(cls)
    assert changes, f"{cls.__name__} changes some defaults"
    for name, shown, _why in changes:
        if shown is None:
            continue  # computed per server
        value = getattr(spawner, name)
        expected = f"{value.__module__}.{value.__qualname__}" if callable(value) else repr(value)
        assert shown == expected, name
    names = {name for name, *_ in changes}
    assert ("gpu_backend" in names) == (cls is GPULocalSpawner)  # 'simulated' for local processes only
    assert {"options_form", "options_from_form"} <= names  # the profile form, on every GPU spawner


def test_a_misspelt_block_option_or_an_option_without_help_fails_the_build():
    source = ["```{gpu-options} jupyterhub_gpu.service.app.GPUService\n:levle: 3\n```\n"]
    with pytest.raises(ExtensionError, match="levle"):
        gpu_docs.expand_options(None, "reference/configuration", source)
    with pytest.raises(ExtensionError, match=r"cannot load 'jupyterhub_gpu\.nothing\.Here'"):
        gpu_docs.expand_options(None, "x", ["```{gpu-options} jupyterhub_gpu.nothing.Here\n```\n"])

    class Undocumented(GPUService):
        quiet = GPUService.class_traits()["tick_interval"].__class__(1).tag(config=True)

    with pytest.raises(ExtensionError, match=r"Undocumented\.quiet has no help"):
        gpu_docs.options_markdown(Undocumented, 2, [])


def test_a_block_becomes_its_markdown_when_the_page_is_read():
    source = ["intro\n\n```{gpu-options} jupyterhub_gpu.spawners.kube.spawner.GPUKubeSpawner\n:level: 4\n```\n\nend\n"]
    gpu_docs.expand_options(None, "reference/configuration", source)
    assert source[0].startswith("intro\n\n#### `GPUKubeSpawner.datasets_claim`")
    assert "{gpu-options}" not in source[0] and source[0].endswith("\nend\n")


# -- the REST reference ----------------------------------------------------------------------------------------


def operations(spec) -> set[tuple[str, str]]:
    return {(m, p) for p, item in spec["paths"].items() for m in gpu_docs._operations(item)}


def test_every_path_is_shown_under_the_server_that_serves_it():
    served = gpu_docs.served_paths(SPEC)
    assert len(operations(served)) == len(operations(SPEC))
    assert ("get", "/services/gpu/metrics") in operations(served)  # its own server, not under api/v1
    assert ("get", "/services/gpu/api/v1/me") in operations(served)
    assert all(p.startswith("/services/gpu/") for _, p in operations(served))


def test_every_operation_is_in_a_group_with_its_parameters():
    served = gpu_docs.served_paths(SPEC)
    groups = gpu_docs.operation_groups(served)
    listed = [tag["name"] for tag in SPEC["tags"]]
    assert list(groups)[: len(listed)] == listed
    found = set()
    for paths in groups.values():
        found |= operations({"paths": paths})
        for path, item in paths.items():
            assert item["parameters"] == served["paths"][path].get("parameters", []), path
    assert found == operations(served)
