#!/usr/bin/env python3
"""Check a udev rules file's syntax and that it names the guest driver's
device nodes.  Debian 12's udevadm (systemd 252) has no `verify`, so this
does the part of it that matters here: every line is KEY[{attr}]OP"value"
pairs joined by commas, the keys are udev's, match keys use == or != and
assignment keys =, += , -= or :=; then the rule's SUBSYSTEM and KERNEL
patterns must match the class and the node names the driver creates
(class_create("vcuda"), "vcuda%u"), MODE must be the one asked for, and
the node must be linked as /dev/nvidiaN (JAX looks for that name).

    check-udev-rule.py RULES DRIVER_SOURCE MODE
"""
import fnmatch, re, sys

MATCH = {'ACTION', 'DEVPATH', 'KERNEL', 'KERNELS', 'NAME', 'SYMLINK', 'SUBSYSTEM', 'SUBSYSTEMS',
         'DRIVER', 'DRIVERS', 'ATTR', 'ATTRS', 'SYSCTL', 'TAG', 'TAGS', 'TEST', 'PROGRAM', 'RESULT',
         'ENV', 'CONST', 'TAG', 'GOTO', 'LABEL'}
ASSIGN = {'NAME', 'SYMLINK', 'OWNER', 'GROUP', 'MODE', 'SECLABEL', 'ATTR', 'SYSCTL', 'ENV', 'TAG',
          'RUN', 'LABEL', 'GOTO', 'IMPORT', 'OPTIONS'}
PAIR = re.compile(r'\s*([A-Z_]+)(\{[^}]*\})?\s*(==|!=|\+=|-=|:=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')

def parse(line):
    pairs, pos = [], 0
    while pos < len(line):
        m = PAIR.match(line, pos)
        if not m:
            raise ValueError(f'cannot parse at column {pos + 1}: {line[pos:]!r}')
        key, attr, op, val, sep = m.groups()
        if op in ('==', '!='):
            if key not in MATCH:
                raise ValueError(f'{key} is not a match key')
        elif key not in ASSIGN:
            raise ValueError(f'{key} is not an assignment key')
        pairs.append((key, op, val))
        pos = m.end()
        if not sep and pos < len(line):
            raise ValueError(f'no comma before {line[pos:]!r}')
    return pairs

def main():
    rules, driver, want_mode = sys.argv[1:4]
    src = open(driver).read()
    cls = re.search(r'class_create\((?:THIS_MODULE,\s*)?"([^"]+)"\)', src)
    node = re.search(r'device_create\w*\([^;]*?"(\w+)%u"', src, re.S)
    if not cls or not node:
        sys.exit(f'{driver}: no class_create("...") or device_create(... "name%u")')
    fails = 0
    rule_lines = []
    for n, raw in enumerate(open(rules), 1):
        line = raw.strip()
        if not line or line.startswith('#'):
            continue
        try:
            rule_lines.append(dict((k, (op, v)) for k, op, v in parse(line)))
        except ValueError as e:
            print(f'FAIL {rules}:{n}: {e}')
            fails += 1
    if len(rule_lines) != 1:
        print(f'FAIL {rules}: {len(rule_lines)} rules, want 1')
        sys.exit(1)
    r = rule_lines[0]
    want = [('SUBSYSTEM', '==', cls.group(1)), ('MODE', '=', want_mode), ('OWNER', '=', 'root'),
            ('SYMLINK', '+=', 'nvidia%n')]
    for key, op, val in want:
        if r.get(key) != (op, val):
            print(f'FAIL {key}{op}"{val}" (rule has {r.get(key)})')
            fails += 1
    kern = r.get('KERNEL', ('==', '*'))
    names = [f'{node.group(1)}{i}' for i in (0, 7, 15)]
    if kern[0] != '==' or not all(fnmatch.fnmatchcase(x, kern[1]) for x in names) or \
            fnmatch.fnmatchcase('vcudax', kern[1]) or fnmatch.fnmatchcase('nvidia0', kern[1]):
        print(f'FAIL KERNEL {kern} does not match exactly the nodes {names[0]}..')
        fails += 1
    print(f'{"FAIL" if fails else "PASS"} {rules}: class {cls.group(1)}, nodes {node.group(1)}N, mode {want_mode}')
    sys.exit(1 if fails else 0)

main()
