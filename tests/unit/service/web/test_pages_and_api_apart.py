"""The usage pages and the REST handlers share functions (``service/web/actions/``), never classes.

A page that subclassed a REST handler ran the handler's methods with its own ``json_body``/``write_json``/
``finish`` put in their place: a change to the handler changed the page in ways no one saw. Here every class of
the pages and of the REST API is imported and its bases read: no page class has a REST handler's class among
its bases, and no REST handler a page's.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import jupyterhub_gpu.service.web.api as api_package
import jupyterhub_gpu.service.web.pages as pages_package


def _classes(package) -> list[type]:
    found = []
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        found += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    return found


def _bases_from(cls: type, package) -> list[str]:
    prefix = package.__name__ + "."
    return [f"{b.__module__}.{b.__qualname__}" for b in cls.__mro__[1:] if b.__module__.startswith(prefix)]


def test_no_page_subclasses_a_rest_handler_and_no_rest_handler_a_page():
    pages, handlers = _classes(pages_package), _classes(api_package)
    assert any(c.__name__ == "ReservationFormHandler" for c in pages)  # the forms that once ran the API's methods
    assert any(c.__name__ == "ReservationsHandler" for c in handlers)
    wrong = {f"{c.__module__}.{c.__qualname__}": _bases_from(c, api_package) for c in pages}
    wrong |= {f"{c.__module__}.{c.__qualname__}": _bases_from(c, pages_package) for c in handlers}
    assert not {name: bases for name, bases in wrong.items() if bases}
