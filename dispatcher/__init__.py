"""The hub. Placement's hot modules load compiled when a build of these sources exists
(dispatcher/native.py)."""

from dispatcher.native import activate as _activate

_activate(__path__)
