"""Sphinx configuration of the documentation site: `make docs` builds it into docs/_build/html.

The pages are the Markdown of docs/ (read by MyST, so their relative `.md` links and GitHub-style heading anchors
work on the site as they do on GitHub) and README.md as the home page (docs/index.md). The configuration
reference and the REST reference are generated at build time by docs/_ext/gpu_docs.py, from the traitlets of the
code and from jupyterhub_gpu/service/web/openapi.yaml. `make docs` passes -W: any warning fails the build.
"""

import sys
from pathlib import Path

from jupyterhub_gpu import __version__

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

project = "jupyterhub-gpu"
author = "the jupyterhub-gpu authors"
release = version = __version__

extensions = ["myst_parser", "sphinxcontrib.openapi", "gpu_docs"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

# MyST: ::: fences for directives where a ``` fence would be read as code elsewhere; heading anchors as GitHub
# makes them (the pages link to `admin.md#3-the-gpu-inventory`), at every level the pages use
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 6

html_theme = "pydata_sphinx_theme"
html_title = f"jupyterhub-gpu {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc", "sourcelink"],
}
html_show_sourcelink = True

# Markdown files of the repository outside docs/ that the pages link to, and the site's page that includes each
gpu_docs_outside_pages = {"benchmarks/README.md": "reference/benchmarks"}
