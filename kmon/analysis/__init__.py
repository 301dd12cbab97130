"""Fleet analysis of kmon recordings on Apache Spark (``kmon analyze``); see docs/analysis.md."""
