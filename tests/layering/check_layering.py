#!/usr/bin/env python3
"""Checks the include rules between dedup's layers (ARCHITECTURE.md).

Data flows one way: proto -> server -> (replication) -> storage, and the
client shares only common/ with the server. Each rule forbids a directory's
.h/.cc files from including some headers *directly* (#include lines of the
file itself; what a header it includes pulls in is that header's business,
checked in its own directory).

Usage: check_layering.py [--self-test] [ROOT]
Prints each violation as `file:line: <rule>` and exits 1 when there is one.
--self-test first checks, on made-up include lines, that each rule catches
what it should and lets the rest through (exit 2 when it does not).
"""

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')

# Header families by what they belong to.
GRPC = re.compile(r'^(grpc|grpcpp|grpc\+\+)/|\.grpc\.pb\.h$')
PROTOBUF = re.compile(r'^google/protobuf/|\.pb\.h$|^dedup/v1/')
RAFT = re.compile(r'^(raft\.h$|raft/)')
LIBUV = re.compile(r'^uv\.h$|^uv/')


def _under(*dirs):
    return re.compile(r'^(%s)/' % '|'.join(re.escape(d) for d in dirs))


# (directory, rule text, pattern of the forbidden include paths).
RULES = [
    ('storage', 'storage/ includes no gRPC header', GRPC),
    ('storage', 'storage/ includes no protobuf or generated dedup/v1 header',
     PROTOBUF),
    ('storage', 'storage/ includes no Raft header', RAFT),
    ('storage', 'storage/ includes no libuv header', LIBUV),
    ('storage', 'storage/ includes nothing from server/, replication/ or '
     'client/', _under('server', 'replication', 'client')),
    ('replication', 'replication/ includes no gRPC header', GRPC),
    ('replication', 'replication/ includes nothing from server/ or client/',
     _under('server', 'client')),
    ('client', 'client/ includes nothing from server/, storage/ or '
     'replication/', _under('server', 'storage', 'replication')),
    ('server', 'server/ includes nothing from client/', _under('client')),
    ('common', 'common/ includes nothing from server/, storage/, '
     'replication/ or client/',
     _under('server', 'storage', 'replication', 'client')),
]


def violations_in_lines(directory, lines):
    """Yields (line number, rule text) for each forbidden include."""
    for number, line in enumerate(lines, start=1):
        match = INCLUDE.match(line)
        if not match:
            continue
        path = match.group(1)
        for rule_dir, text, pattern in RULES:
            if rule_dir == directory and pattern.search(path):
                yield number, text


def sources(root, directory):
    top = os.path.join(root, directory)
    for base, dirs, files in os.walk(top):
        # Other languages' trees (client/typescript's node_modules) hold no
        # dedup C++.
        dirs[:] = sorted(d for d in dirs if d != 'node_modules')
        for name in sorted(files):
            if name.endswith(('.h', '.cc')):
                yield os.path.join(base, name)


def check(root):
    found = []
    for directory in sorted({rule[0] for rule in RULES}):
        if not os.path.isdir(os.path.join(root, directory)):
            found.append('%s/: missing (wrong ROOT?)' % directory)
            continue
        for path in sources(root, directory):
            with open(path, encoding='utf-8', errors='replace') as f:
                lines = f.read().splitlines()
            for number, text in violations_in_lines(directory, lines):
                found.append('%s:%d: %s' %
                             (os.path.relpath(path, root), number, text))
    return found


# (directory, include line, must it be refused).
SELF_TEST_CASES = [
    ('storage', '#include "grpcpp/grpcpp.h"', True),
    ('storage', '#include <grpc/grpc.h>', True),
    ('storage', '#include "google/protobuf/message.h"', True),
    ('storage', '#include "dedup/v1/dedup.pb.h"', True),
    ('storage', '#include "other/thing.pb.h"', True),
    ('storage', '#  include <raft.h>', True),
    ('storage', '#include <raft/uv.h>', True),
    ('storage', '#include <uv.h>', True),
    ('storage', '#include "replication/consensus.h"', True),
    ('storage', '#include "server/metrics.h"', True),
    ('storage', '#include "rocksdb/db.h"', False),
    ('storage', '#include "storage/record.h"', False),
    ('storage', '// #include "grpcpp/grpcpp.h" in a comment', False),
    ('replication', '#include "grpcpp/server.h"', True),
    ('replication', '#include "dedup/v1/cluster.grpc.pb.h"', True),
    ('replication', '#include "server/tls.h"', True),
    ('replication', '#include <raft.h>', False),
    ('replication', '#include "replication/raft_codes.h"', False),
    ('replication', '#include "storage/store.h"', False),
    ('client', '#include "server/auth.h"', True),
    ('client', '#include "storage/record.h"', True),
    ('client', '#include "replication/consensus.h"', True),
    ('client', '#include "common/channel_security.h"', False),
    ('client', '#include "grpcpp/channel.h"', False),
    ('server', '#include "client/dedup_client.h"', True),
    ('server', '#include "common/channel_security.h"', False),
    ('server', '#include "storage/store.h"', False),
    ('common', '#include "client/uuid.h"', True),
    ('common', '#include "server/tls.h"', True),
    ('common', '#include "storage/clock.h"', True),
    ('common', '#include "replication/consensus.h"', True),
    ('common', '#include "grpcpp/channel.h"', False),
]


def self_test():
    failures = []
    for directory, line, refused in SELF_TEST_CASES:
        got = bool(list(violations_in_lines(directory, [line])))
        if got != refused:
            failures.append('self-test: %s/ %r: expected %s, got %s' %
                            (directory, line, 'refused' if refused else
                             'allowed', 'refused' if got else 'allowed'))
    return failures


def main(argv):
    args = argv[1:]
    if args and args[0] == '--self-test':
        args = args[1:]
        failures = self_test()
        if failures:
            print('\n'.join(failures))
            return 2
    root = args[0] if args else os.path.join(os.path.dirname(__file__), '..',
                                             '..')
    found = check(os.path.abspath(root))
    if found:
        print('\n'.join(found))
        print('%d layering violation(s); the rules: ARCHITECTURE.md' %
              len(found))
        return 1
    print('layering: no violation')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
