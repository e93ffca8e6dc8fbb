"""ARES's iid prediction-powered interval for a mean, verbatim, for tests/evaluate/test_ppi.py only.

Provenance: github.com/stanford-futuredata/ARES at commit c7c9018a755faf8347c4da415632bae1593ef104,
ares/RAG_Automatic_Evaluation/ppi.py:77-86 (`pp_mean_iid_asymptotic`, whole).
Copyright the ARES authors (Saad-Falcon et al.). Licence: Apache License 2.0 (tests/upstream/LICENSE-ARES.txt).
Changes: none to the function; only the imports it needs.
"""

import numpy as np
from scipy.stats import norm


# ---- ares/RAG_Automatic_Evaluation/ppi.py:77-86, verbatim ----
def pp_mean_iid_asymptotic(Y_labeled, Yhat_labeled, Yhat_unlabeled, alpha):
    n = Y_labeled.shape[0]
    N = Yhat_unlabeled.shape[0]
    tildethetaf = Yhat_unlabeled.mean()
    rechat = (Yhat_labeled - Y_labeled).mean()
    thetahatPP = tildethetaf - rechat
    sigmaftilde = np.std(Yhat_unlabeled)
    sigmarec = np.std(Yhat_labeled -  Y_labeled)
    hw = norm.ppf(1-alpha/2)*np.sqrt((sigmaftilde**2/N) + (sigmarec**2/n))
    return [thetahatPP - hw, thetahatPP + hw]
