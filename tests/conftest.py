"""Make this folder's helper modules (`import_rule`) importable by the tests beside them.

pytest runs with `--import-mode=importlib`, which does not put test folders on `sys.path`; these helpers are plain
modules, not a package, so the folder is added here once instead of in every test file.
"""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
