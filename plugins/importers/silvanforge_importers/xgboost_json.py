"""(being written)"""
def detect(path, head): return False
detect_json = detect_ubjson = detect
def load(path): raise NotImplementedError
load_json = load_ubjson = load
