"""Prints the site-packages (or Debian's dist-packages) directory on this interpreter's path
that lies under the prefix given, or nothing: where meson installs the package so that
`import accel` needs no PYTHONPATH (clients/python/meson.build)."""
import sys

prefix = sys.argv[1].rstrip("/") + "/"
print(next((d for d in sys.path if d.startswith(prefix)
            and d.rstrip("/").endswith(("site-packages", "dist-packages"))), ""))
