"""zerolab.i18n: the language a learner is spoken to in (language.py); the Chinese of every translated
message (messages_zh.py).

Its layer in docs/ARCHITECTURE.md; this file hands on the names learners and the other layers use."""
from .language import (normalize, edition_of, kernel_lang, cli_lang, lang, is_zh, set_lang, using,
    Catalogue, catalogue, width, fill, join_and, LANG_HELP, add_lang_argument)
