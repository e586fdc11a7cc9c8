"""Write zerolab/data/deepspeed_config.schema.json from the key declarations (zerolab/config/keys.py).

Run after adding or changing a key: ``python tools/make_config_schema.py``. tests/test_config_schema.py
fails while the file and the declarations differ. Point an editor at the file (VS Code:
``"json.schemas": [{"fileMatch": ["ds_config*.json"], "url": "./zerolab/data/deepspeed_config.schema.json"}]``)
to have typos and bad values underlined as you write a config.
"""
import json
import pathlib

from zerolab.config.keys import config_schema

PATH = pathlib.Path(__file__).resolve().parent.parent / "zerolab" / "data" / "deepspeed_config.schema.json"

if __name__ == "__main__":
    PATH.write_text(json.dumps(config_schema(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {PATH}")
