"""Imported first by the kmon command: as root, forget the environment variables that make
OpenSSL, Kerberos or SASL load a library (see kmon.sources.child_env.drop_library_loaders).

Python's ``hashlib`` reads ``OPENSSL_CONF`` as it is imported, so this runs before any
other kmon module is: ``kmon.cli`` imports it ahead of everything else.
"""

import os

from kmon.sources.child_env import drop_library_loaders

drop_library_loaders(os.environ, as_root=os.geteuid() == 0)
