"""Imported first by the kmon command: as root, forget the environment variables that make
OpenSSL, Kerberos or Cyrus SASL load a library into kmon.

Under ``sudo -E`` or ``su`` without ``-`` they are another user's, and name engines,
providers or plugins that would run as root: Python's ``hashlib`` reads ``OPENSSL_CONF``
as it is imported, librdkafka as it starts TLS. So this module imports nothing of
kmon's, and ``kmon.cli`` imports it ahead of everything else.
"""

import os

LIBRARY_LOADERS = ("OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "KRB5_CONFIG",
                   "SASL_PATH", "SASL_CONF_PATH")

if os.geteuid() == 0:
    for name in LIBRARY_LOADERS:
        os.environ.pop(name, None)
