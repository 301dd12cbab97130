"""The helpers kmon's tests share, one import for every test module (fixtures live in
conftest.py): re-exported from the ``support`` package, where each lives by subject."""

from support.assertions import *  # noqa: F403
from support.assertions import __all__ as _assertions
from support.clusters import *  # noqa: F403
from support.clusters import __all__ as _clusters
from support.common import *  # noqa: F403
from support.common import __all__ as _common
from support.dashboards import *  # noqa: F403
from support.dashboards import __all__ as _dashboards
from support.drops import *  # noqa: F403
from support.drops import __all__ as _drops
from support.processes import *  # noqa: F403
from support.processes import __all__ as _processes
from support.recordings import *  # noqa: F403
from support.recordings import __all__ as _recordings
from support.replays import *  # noqa: F403
from support.replays import __all__ as _replays
from support.run_shared import *  # noqa: F403
from support.run_shared import __all__ as _run_shared
from support.serve import *  # noqa: F403
from support.serve import __all__ as _serve
from support.tls import *  # noqa: F403
from support.tls import __all__ as _tls
from support.users import *  # noqa: F403
from support.users import __all__ as _users
from support.wire import *  # noqa: F403
from support.wire import __all__ as _wire

__all__ = [*_assertions, *_clusters, *_common, *_dashboards, *_drops, *_processes, *_recordings,
           *_replays, *_run_shared, *_serve, *_tls, *_users, *_wire]
