"""Sphinx's configuration of the course's static site (``python tools/build_site.py``).

The pages are the stored notebooks with their stored outputs: nothing is executed
(``nb_execution_mode = "off"``). ``tools/build_site.py`` stages each edition's notebooks and its index
page, then builds them with this file (``-c site``), the Chinese edition with ``language = zh_CN``.
"""
project = "zerolab"
author = "zerolab"
copyright = "zerolab contributors, Apache-2.0"
extensions = ["myst_nb"]
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "html_image"]
myst_heading_anchors = 3
html_theme = "alabaster"
html_theme_options = {"sidebar_collapse": True, "page_width": "1100px", "sidebar_width": "260px"}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}
html_show_sourcelink = False
html_copy_source = False
exclude_patterns = ["_build"]
