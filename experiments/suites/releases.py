# ruff: noqa: E501  (a sha256 beside its path does not fit a line)
"""Known benchmark releases, by the sha256 of each file: what dataset identity recognises.

Data only (experiments/suites/identity.py reads it). A release maps each file's path, as a loader names
it (`<tier>/<conversation>/chat.json` for BEAM, the file name for single-file benchmarks), to its sha256.
Hashes computed from the files themselves (`sha256sum`); add a release by hashing its files the same way.
"""

from types import MappingProxyType

RELEASES = MappingProxyType(
    {
        # mohammadtavakoli78/BEAM at commit b2a3ee8, folder chats/100K (BEAM calls the tier "128K").
        "BEAM 100K at upstream commit b2a3ee8": MappingProxyType(
            {
                "100K/1/chat.json": "ea71efd5dcc13f7366d3737b45d532eadb3d1497f3d6f23d1fa1c4004d5ffdf2",
                "100K/1/probing_questions/probing_questions.json": "047398ff1497674b11585e7b4829c3d64d2d5e63f7f3572c826b73ca1faaf898",
                "100K/1/topic.json": "5c5bd3cb5e168dec130b9a7ffd87b9c992ca90e1a26f803f47bc2467574d7a4a",
                "100K/2/chat.json": "3a3bd796f4aa24e8f34e718dc2823ae942663349eb89054f03885051e2daf1c4",
                "100K/2/probing_questions/probing_questions.json": "d188e929644c9ef9fcd4520e7b5a3daf2c2e069b1247a324bd13d5aadd1ed96e",
                "100K/2/topic.json": "edd1cd902ef7ee81951c88cffeec57040b0559a6a148e17ec8b78ef86819003f",
                "100K/3/chat.json": "432d3ae5493c04a17a5b6b0ef7c012a70e70ac5cfcaef13059fca6bedb903009",
                "100K/3/probing_questions/probing_questions.json": "f53030f3753b0e0a93b330bc62d597cb66375c0c794094d7e69b7646df46e324",
                "100K/3/topic.json": "5e59c06cee08893027074a3f9824c7fbbf27264cc1dff6fb9a0d2f8f437fef65",
                "100K/4/chat.json": "e0ef0f74b1f7ac911e8e0518722335c422cbc1112048e9909911b208c51fc027",
                "100K/4/probing_questions/probing_questions.json": "f69eda522cd7325830c8f78b6f02a571c992b6cf43311fa96f28043fd3c18dae",
                "100K/4/topic.json": "1b7ed8bb6dc8365ac37bde2d1c5d79e73b7bb504e42807af242764414a78dc4c",
                "100K/5/chat.json": "13ac88e483e0d63d3830479fe17f961af1b414503b5077914865eca1c48a1ce8",
                "100K/5/probing_questions/probing_questions.json": "bdd0819a911e46951dbf998905b8eba96a0cdb103cd3dda79ae9c6831e5f195d",
                "100K/5/topic.json": "2fa51bcb19591b8ab232415de6b3dace265c5732f83e31d870893be888e7b668",
                "100K/6/chat.json": "5365cdc41da212fb7143cf9f191ff7862eed8e9ca175b3728fe593adedc87871",
                "100K/6/probing_questions/probing_questions.json": "7a6f88dfdeb3f1b582209a745e7c980158dbb2829a9ceae6cdb08bb868a00035",
                "100K/6/topic.json": "2e8096f4bfa949f7cb9f1d858b0923f0fcf85c51c5d09c98262c9195934a65b6",
                "100K/7/chat.json": "525271b1d24179dbc2deb664c69db0bbaead5938630a0b0d5cd2881b8b79224d",
                "100K/7/probing_questions/probing_questions.json": "2c00219e839d54c7cd3e4fbb396f8a2517fd9f143d3a3b8ea1c4fb9f5c4435c7",
                "100K/7/topic.json": "d305cb0cc837005c2b6de4a87f11e9f5eca52e51f811f85533d0ee180b6dc3b2",
                "100K/8/chat.json": "3207b8f5aa45cd1b2d1e2f37f224831b4696d0cc2352ef514af08f2092b6c239",
                "100K/8/probing_questions/probing_questions.json": "d279dbd8fd293692d29f0057b3dd2468ccb97c7da6df28ae2adc8481d9970148",
                "100K/8/topic.json": "b45443108532bccd845107c25f350a58e088fc7d117303426a256a89324a911a",
                "100K/9/chat.json": "446777f3eed114c27d62030ad86cfb8ad6610fda0fc83dfe98403b8d68b74bd4",
                "100K/9/probing_questions/probing_questions.json": "b7ab1c7022c0b7ac6928f4c2efadd08e2a438dc91e1288209df066cdcd5e9573",
                "100K/9/topic.json": "a47a957cc4811c203b80aa2ca557d4abfa332953f5a14e464b6b8b238aa6a08b",
                "100K/10/chat.json": "de18b7b0ad73491f338296b64ae30f16b94d77404420d971d3f6b513d190ad1c",
                "100K/10/probing_questions/probing_questions.json": "e9bf9bb545b350425a770ef65b501434ba9983c7535b4524dd6ae4d5743b5a95",
                "100K/10/topic.json": "be3c239e101ddd8d0c68f57afeb7f5df9631c9cbf448a26cb5ac7bd97a637dbc",
            }
        ),
        # snap-research/LoCoMo data/locomo10.json cut to its first five samples (conv-26 ... conv-43),
        # as ../shared/locomo/README.md describes; its sha256 is the one that README gives.
        "LoCoMo locomo10.json, conversations 1-5 (conv-26..conv-43)": MappingProxyType(
            {
                "locomo10_conv1-5.json": "1c9979aed9f236d0d6700ff90f205f01c1796875da7956cf94672edd87753933",
            }
        ),
        # The full upstream file (10 conversations, 1,986 questions). Not verified here (only the cut above
        # is on this machine): the sha256 several independent harnesses record for it.
        "LoCoMo locomo10.json (snap-research/LoCoMo data/, 10 conversations)": MappingProxyType(
            {"locomo10.json": "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"}
        ),
        # LongMemEval's cleaned release (Hugging Face xiaowu0162/longmemeval-cleaned). Not verified here (the
        # data cannot be downloaded on this machine): the sha256s a third-party harness records for them.
        "LongMemEval oracle (longmemeval-cleaned)": MappingProxyType(
            {"longmemeval_oracle.json": "821a2034d219ab45846873dd14c14f12cfe7776e73527a483f9dac095d38620c"}
        ),
        "LongMemEval S (longmemeval-cleaned)": MappingProxyType(
            {"longmemeval_s_cleaned.json": "d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442"}
        ),
    }
)
