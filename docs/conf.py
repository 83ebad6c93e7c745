"""Sphinx configuration of the alf_env documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (CI does,
with warnings as errors). The API pages import ``alf_env``, so the package must be
installed (``pip install -r requirements-dev.txt``).
"""

import alf_env

project = "alf_env"
author = "the alf_env developers"
copyright = "the alf_env developers"
release = version = alf_env.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Google-style docstrings only.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# "Attributes:" sections as fields, so that they do not clash with the properties
# autodoc documents under the same names.
napoleon_use_ivar = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_class_signature = "separated"

# Markdown pages (benchmarks.md, reliability.md): anchors for "#section" links.
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = f"alf_env {release}"
html_theme_options = {"description": "Fast, reliable multi-process RL environments",
                      "page_width": "1100px", "sidebar_width": "240px"}
