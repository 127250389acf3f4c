import os, subprocess
os.makedirs('/augefs/ps')
with open('/augefs/ps/in', 'w') as f:
    f.write('a\nb\n')
with open('/augefs/ps/in') as i, open('/augefs/ps/out', 'w') as o:
    subprocess.run(['tr', 'a-z', 'A-Z'], stdin=i, stdout=o, check=True)
assert open('/augefs/ps/out').read() == 'A\nB\n', open('/augefs/ps/out').read()
r = subprocess.run(['cat', 'in'], cwd='/augefs/ps', capture_output=True, check=True)
assert r.stdout == b'a\nb\n', r
r = subprocess.run(['sh', '-c', 'cat in > env.txt'], cwd='/augefs/ps', env={'PATH': '/usr/bin:/bin'}, check=True)
assert open('/augefs/ps/env.txt').read() == 'a\nb\n'
os.chdir('/augefs/ps')
assert os.system('wc -l < in > count') == 0
assert open('count').read().strip() == '2'
assert subprocess.check_output('ls', shell=True).decode().split() == ['count', 'env.txt', 'in', 'out']
print('python spawn ok')
