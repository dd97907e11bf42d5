"""``python -m bench NAME [options]`` runs ``bench/NAME.py``."""
import importlib
import sys

if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
    print("usage: python -m bench all|report|prompt_compare|token_cost|kv_reuse|stores|server|engine|scaling|"
          "llama_batch|random_gguf|drift|responses|remote|kv_cache|first_answers|constraints|forced_calls|"
          "schema_suite|builds|overflow [options] (see --help of each)")
    sys.exit(0)
module = importlib.import_module(f"bench.{sys.argv[1]}")
sys.exit(module.main(sys.argv[2:]))
