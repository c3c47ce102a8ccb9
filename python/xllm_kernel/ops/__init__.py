"""The public operator API, one module per group (xllm_kernel.ops.<group>).

    import xllm_kernel
    from xllm_kernel.ops import rms_norm

    xllm_kernel.initialize(device="cpu")
    y = rms_norm(x, weight, 1e-6)

Every operation of every group in the catalog is exported here under its name; the list follows
from the catalog (catalog._BUILTINS), so a new group adds nothing to this file.
"""

import importlib as _importlib

from xllm_kernel import catalog as _catalog

__all__ = []
for _module_name in _catalog._BUILTINS:
    _module = _importlib.import_module(_module_name)
    for _operation in _module.OPERATIONS:
        globals()[_operation.name] = getattr(_module, _operation.name)
        __all__.append(_operation.name)
del _module_name, _module, _operation
