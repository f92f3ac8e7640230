import os
import sys

# The dialect tests share helpers in this folder (dialect_helpers.py).
sys.path.insert(0, os.path.dirname(__file__))
