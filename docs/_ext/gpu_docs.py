"""The documentation site's own Sphinx extension: references generated at build time, never committed.

- ``{gpu-options}`` blocks in a Markdown page become the options of a traitlets class: every option the
  class itself declares (``class_own_traits(config=True)``), its type, its default and its help, and the
  defaults the class changes of options it inherits (``@default`` methods of its own). The block is
  expanded into Markdown when Sphinx reads the page (``source-read``), so MyST parses the options'
  headings like any other heading (anchors, the page's table of contents)::

      ```{gpu-options} jupyterhub_gpu.service.app.GPUService
      :level: 2
      ```

  ``:level:`` is the options' heading level; ``:shared: GPUDockerSpawner, GPUKubeSpawner`` names the
  classes through which a mixin's options are set (their headings then carry the option's name alone).
- ``gpu-openapi`` (in a reST page) renders ``openapi.yaml`` with sphinxcontrib-openapi's ``httpdomain``
  renderer, grouped by the spec's tags, each path with the server it is served under (the spec's paths
  are relative to its ``servers``; ``/metrics`` has its own), after the spec's own introduction.
- Links from the pages to Markdown files of the repository outside ``docs/`` (``../benchmarks/README.md``)
  go to the site's page that includes that file (``gpu_docs_outside_pages``): on GitHub the link opens the
  file, on the site its page.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
from pathlib import Path

import sphinx_mdinclude
import yaml
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.addnodes import pending_xref
from sphinx.errors import ExtensionError
from sphinx.transforms import SphinxTransform
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles
from sphinxcontrib.openapi.renderers import HttpdomainRenderer
from traitlets import CaselessStrEnum, Enum, Union
from traitlets.traitlets import DefaultHandler

# -- the configuration reference ------------------------------------------------------------------------------

_BLOCK = re.compile(r"^```\{gpu-options\}[ \t]+(?P<target>\S+)[ \t]*\n(?P<options>(?::\w+:.*\n)*)```[ \t]*$", re.M)


def load(dotted: str) -> type:
    """``package.module.Class`` -> the class (an error naming it when it is not there)."""
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ExtensionError(f"gpu-options: cannot load {dotted!r}: {e}") from e


def type_of(trait) -> str:
    """A trait's type as an admin writes it: ``Unicode``, ``List or Callable``, ``one of 'a', 'b'``."""
    if isinstance(trait, (Enum, CaselessStrEnum)):
        text = "one of " + ", ".join(f"`{v!r}`" for v in trait.values)
    elif isinstance(trait, Union):
        text = " or ".join(f"`{type(t).__name__}`" for t in trait.trait_types)
    else:
        text = f"`{type(trait).__name__}`"
    return text + (" or `None`" if trait.allow_none and "None" not in text else "")


def _code(text: str) -> str:
    """``text`` as one Markdown code span, whatever backticks it holds."""
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def default_handlers(cls: type) -> dict[str, object]:
    """Option -> the ``@default`` method that gives its default in ``cls``, from this project's classes only.

    The backends' own (DockerSpawner's, KubeSpawner's) belong to their documentation, not this reference.
    """
    found = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("jupyterhub_gpu."):
            continue
        for value in vars(klass).values():
            if isinstance(value, DefaultHandler):
                found.setdefault(value.trait_name, value.func)
    return found


def computed_default(func) -> tuple[str | None, str]:
    """(the default's repr, or None when it depends on the server's settings; why, from the method)."""
    why = inspect.getdoc(func) or " ".join(
        line.strip().lstrip("# ") for line in inspect.getsource(func).splitlines() if line.strip()[:1] == "#"
    )
    try:
        value = func(None)  # the constant ones do not look at the spawner
    except Exception:  # a default computed from the spawner's own settings
        return None, why
    if callable(value):  # a hook: its name, and what it does
        return f"{value.__module__}.{value.__qualname__}", why or (inspect.getdoc(value) or "").split("\n\n")[0]
    return repr(value), why


def own_default_changes(cls: type) -> list[tuple[str, str | None, str]]:
    """(option, new default, why) for each inherited option whose default this project's classes change."""
    own = cls.class_own_traits(config=True)
    everything = cls.class_traits(config=True)
    return sorted(
        (name, *computed_default(func))
        for name, func in default_handlers(cls).items()
        if name not in own and name in everything
    )


def options_markdown(cls: type, level: int, shared: list[str]) -> str:
    """The Markdown reference of ``cls``'s own options (see the module's docstring)."""
    hashes = "#" * level
    owner = cls.__name__
    own = cls.class_own_traits(config=True)
    lines = [] if own else [f"`{owner}` declares no options of its own.", ""]
    for name, trait in sorted(own.items()):
        title = name if shared else f"{owner}.{name}"
        lines += [f"{hashes} `{title}`", ""]
        where = f"`c.{(shared or [owner])[0]}.{name}`" + (f" (or on {', '.join(shared[1:])})" if shared[1:] else "")
        func = default_handlers(cls).get(name)
        default = computed_default(func)[0] if func else trait.default_value_repr()
        shown = _code(default) if default is not None else "computed per server"
        lines += [f"**Type** {type_of(trait)} · **Default** {shown} · **Set** {where}", ""]
        help_text = inspect.cleandoc(trait.help or "")
        if not help_text:
            raise ExtensionError(f"gpu-options: {owner}.{name} has no help: every option says what it does")
        lines += [help_text, ""]
    changes = own_default_changes(cls)
    if changes:
        lines += [f"{hashes} Defaults `{owner}` changes", ""]
        lines += ["| option | default here | why |", "| --- | --- | --- |"]
        for name, default, why in changes:
            shown = _code(default) if default is not None else "computed per server"
            why = " ".join((why or "").split()).replace("|", r"\|")
            lines.append(f"| `{name}` | {shown} | {why or '-'} |")
        lines.append("")
    return "\n".join(lines)


def _options(block: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^:(\w+):(.*)$", block, re.M)}


def expand_options(app, docname, source) -> None:
    """``source-read``: every ``{gpu-options}`` block of the page becomes its generated Markdown."""

    def expand(match: re.Match) -> str:
        options = _options(match.group("options"))
        unknown = set(options) - {"level", "shared"}
        if unknown:
            raise ExtensionError(
                f"gpu-options in {docname}: unknown option(s) {sorted(unknown)}; use :level:, :shared:"
            )
        shared = [name.strip() for name in options.get("shared", "").split(",") if name.strip()]
        return options_markdown(load(match.group("target")), int(options.get("level", 2)), shared)

    source[0] = _BLOCK.sub(expand, source[0])


# -- the REST reference ----------------------------------------------------------------------------------------


def served_paths(spec: dict) -> dict:
    """The spec with each path prefixed by the server it is served under (a path's own ``servers`` first)."""
    spec = copy.deepcopy(spec)
    default = (spec.get("servers") or [{"url": ""}])[0]["url"].rstrip("/")
    paths = {}
    for path, item in spec.get("paths", {}).items():
        servers = item.pop("servers", None)
        prefix = servers[0]["url"].rstrip("/") if servers else default
        paths[prefix + path] = item
    spec["paths"] = paths
    return spec


def _operations(item: dict) -> dict:
    """The operations of a path item (its HTTP methods), without its common parameters."""
    return {method: op for method, op in item.items() if method in HTTP_METHODS}


HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


OTHER = "other"  # the group of operations without a tag


def operation_groups(spec: dict) -> dict[str, dict]:
    """Tag -> the paths with that tag's operations (copies): the spec's tags in its order, then those it uses
    without listing them, then the untagged operations (``OTHER``)."""
    groups = dict.fromkeys(tag["name"] for tag in spec.get("tags", []))
    for item in spec["paths"].values():
        for operation in _operations(item).values():
            groups.update(dict.fromkeys(operation.get("tags") or [OTHER]))
    found = {}
    for group in groups:
        paths = {}
        for path, item in spec["paths"].items():
            chosen = {m: op for m, op in _operations(item).items() if group in (op.get("tags") or [OTHER])}
            if chosen:
                paths[path] = dict(copy.deepcopy(chosen), parameters=copy.deepcopy(item.get("parameters", [])))
        if paths:
            found[group] = paths
    return found


class OpenAPIReference(SphinxDirective):
    """``.. gpu-openapi:: path/to/openapi.yaml``: the spec's introduction, then its operations by tag."""

    required_arguments = 1

    def run(self):
        relpath, abspath = self.env.relfn2path(self.arguments[0])
        self.env.note_dependency(relpath)
        spec = served_paths(yaml.safe_load(Path(abspath).read_text(encoding="utf-8")))
        described = {tag["name"]: tag.get("description", "") for tag in spec.get("tags", [])}
        lines = [*sphinx_mdinclude.convert(spec["info"].get("description", "")).splitlines(), ""]
        for group, paths in operation_groups(spec).items():
            title = group if group != OTHER else "Other endpoints"
            lines += [title, "-" * len(title), ""]
            lines += [*sphinx_mdinclude.convert(described.get(group) or "").splitlines(), ""]
            renderer = HttpdomainRenderer(self.state, {"markup": "commonmark"})
            lines += [*renderer.render_restructuredtext_markup(dict(spec, paths=paths)), ""]
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source=abspath), container)
        return container.children


# -- links to pages outside docs/ ---------------------------------------------------------------------------


class OutsidePages(SphinxTransform):
    """A Markdown link to a repository file outside ``docs/`` goes to the page that includes it."""

    default_priority = 5

    def apply(self, **kwargs) -> None:
        root = Path(self.app.srcdir).parent
        pages = {(root / path).with_suffix(""): docname for path, docname in self.config.gpu_docs_outside_pages.items()}
        for node in self.document.findall(pending_xref):
            if node.get("reftype") != "myst" or node.get("refdomain") != "doc":
                continue
            target = Path(node["reftarget"])
            if target.is_absolute() and target in pages:
                node["reftarget"] = pages[target]


def setup(app):
    app.add_config_value("gpu_docs_outside_pages", {}, "env")
    app.connect("source-read", expand_options)
    app.add_directive("gpu-openapi", OpenAPIReference)
    app.add_transform(OutsidePages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
