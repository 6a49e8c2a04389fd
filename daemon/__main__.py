import sys

from stet.daemon.app.main import main

sys.exit(main())
