"""Documentation generated from code stays current."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_catalogue_page_is_generated_from_the_registry():
    out = subprocess.run([sys.executable, "docs/gen_catalogue.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
