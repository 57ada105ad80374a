"""Print where `make install` puts the provisioner: the site-packages
directory of this python that lies under PREFIX (Debian's python3 has
/usr/local/lib/python3.X/dist-packages for /usr/local and
/usr/lib/python3/dist-packages for /usr on its path), else
PREFIX/lib/pythonX.Y/site-packages (add it to PYTHONPATH)."""
import os
import site
import sys
import sysconfig

prefix = os.path.normpath(sys.argv[1])
for d in site.getsitepackages():
    if os.path.normpath(d).startswith(prefix + "/lib/"):
        print(os.path.normpath(d))
        break
else:
    print(sysconfig.get_path("purelib", "posix_prefix", vars={"base": prefix, "platbase": prefix}))
