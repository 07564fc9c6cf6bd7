"""Hardware roofs for graphcost: the ``HardwareSpec`` record and the catalog of named devices.

``resolve("h100")`` or ``resolve("my-board.toml")`` gives a spec; ``DEFAULT_HARDWARE`` is the roofline chapter's
reference edge SoC. The catalog module also holds the command-line helpers (``parse_quantity``,
``parse_peak_flops``) and ``describe`` for ``graphcost hardware show``.
"""

from .catalog import DEFAULT_HARDWARE, HardwareError, adhoc, get, list_specs, load_file, override, resolve
from .spec import HardwareSpec

__all__ = [
    "DEFAULT_HARDWARE",
    "HardwareError",
    "HardwareSpec",
    "adhoc",
    "get",
    "list_specs",
    "load_file",
    "override",
    "resolve",
]
