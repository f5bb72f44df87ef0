"""The UI's leaves: one-line error text, the two leaf widgets (HTML, heat map image) and closing a
widget tree.

Everything else in :mod:`tvm_hybrid_nb.ui` builds on these; this module imports nothing else of the
UI.
"""
from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..errors import HybridError


def error_text(exc: BaseException) -> str:
    """One line for an exception: the message of our own errors, ``Type: message`` otherwise.

    Parameters
    ----------
    exc : BaseException
        The error to describe.

    Returns
    -------
    str
        The first line of its message (the type's name when the message is empty).
    """
    if isinstance(exc, HybridError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first


def html_view(html: str, css_class: str | None = None) -> widgets.HTML:
    """An HTML widget holding ``html``.

    Parameters
    ----------
    html : str
        The widget's value.
    css_class : str, optional
        A CSS class added to the widget (the browser tests find widgets by it).

    Returns
    -------
    ipywidgets.HTML
    """
    w = widgets.HTML(value=html)
    if css_class:
        w.add_class(css_class)
    return w


def heatmap_image(png: bytes) -> widgets.Image:
    """An Image widget showing PNG bytes (a mismatch heat map).

    Parameters
    ----------
    png : bytes
        The image, e.g. from :func:`tvm_hybrid_nb.presentation.heatmap_png`.

    Returns
    -------
    ipywidgets.Image
    """
    return widgets.Image(value=png, format="png", layout=widgets.Layout(max_width="520px"))


def close_tree(widget: Any) -> None:
    """Close ``widget`` and everything below it (children, layouts, styles).

    Widgets kept as plain attributes (a view not shown right now, panels built on demand, in a dict
    or not) are closed too.

    Parameters
    ----------
    widget : ipywidgets.Widget
        The root; anything that is not a widget is ignored.
    """
    seen: set[int] = set()
    stack = [widget]
    while stack:
        w = stack.pop()
        if id(w) in seen or not isinstance(w, widgets.Widget):
            continue
        seen.add(id(w))
        for name in w.keys:
            value = getattr(w, name, None)
            if isinstance(value, widgets.Widget):
                stack.append(value)
            elif isinstance(value, (list, tuple)):
                stack.extend(v for v in value if isinstance(v, widgets.Widget))
        # Widgets kept as plain attributes (a view not shown right now, panels built on demand).
        for extra in list(vars(w).values()):
            if isinstance(extra, widgets.Widget):
                stack.append(extra)
            elif isinstance(extra, dict):
                stack.extend(v for v in extra.values() if isinstance(v, widgets.Widget))
        w.close()
