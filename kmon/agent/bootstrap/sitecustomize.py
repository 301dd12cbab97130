"""Put on PYTHONPATH by ``kmon run``: instruments confluent-kafka clients at start-up."""

import sys

try:
    from kmon.agent.autoinstrument import chain_next_sitecustomize, install
except ImportError as err:  # kmon is not installed for this interpreter
    print(f"kmon run: clients not instrumented ({err})", file=sys.stderr)
else:
    install()
    chain_next_sitecustomize(__file__)
