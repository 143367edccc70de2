from . import PROGRAMS, binary

for name in PROGRAMS:
    print(f"{name}: {binary(name)}")
