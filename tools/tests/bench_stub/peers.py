"""Stands in for bench/peers.py in the moegemm program's tests: prints what `moegemm bench` handed over."""
import os
import sys

print("argv:", " ".join(sys.argv[1:]))
print("PYTHONPATH=" + os.environ.get("PYTHONPATH", ""))
