package ycsb

import (
	"fmt"
	"os"
	"strings"

	"github.com/magiconair/properties"
)

// StandardWorkloads are YCSB's core workloads A-F (workloads/workloada ..
// workloadf of YCSB), keyed by their letter. Every one has 1 KB records of
// ten 100-byte fields (YCSB's defaults: fieldcount=10, fieldlength=100),
// reads all fields and updates one.
var StandardWorkloads = map[string]string{
	// A, update heavy: a session store recording recent actions.
	"a": "readproportion=0.5\nupdateproportion=0.5\nrequestdistribution=zipfian\n",
	// B, read mostly: photo tagging (tags are added, mostly read).
	"b": "readproportion=0.95\nupdateproportion=0.05\nrequestdistribution=zipfian\n",
	// C, read only: a user profile cache built elsewhere.
	"c": "readproportion=1\nupdateproportion=0\nrequestdistribution=zipfian\n",
	// D, read latest: user status updates, people read the newest.
	"d": "readproportion=0.95\nupdateproportion=0\ninsertproportion=0.05\nrequestdistribution=latest\n",
	// E, short ranges: threaded conversations, each scan a thread's posts.
	"e": "readproportion=0\nupdateproportion=0\nscanproportion=0.95\ninsertproportion=0.05\nrequestdistribution=zipfian\nmaxscanlength=100\nscanlengthdistribution=uniform\n",
	// F, read-modify-write: a user database where records are read,
	// changed and written back.
	"f": "readproportion=0.5\nupdateproportion=0\nreadmodifywriteproportion=0.5\nrequestdistribution=zipfian\n",
}

// StandardOrder is the order YCSB recommends running the core workloads
// in: the ones that insert (D, E) last, so that A, B, C and F see the
// loaded records only.
var StandardOrder = []string{"a", "b", "c", "f", "d", "e"}

// WorkloadProperties returns the properties of a standard workload (a-f,
// either case) or, for anything else, of the properties file at that path.
// Errors wrap ErrBadProperty (or the file's read error).
func WorkloadProperties(nameOrPath string) (*properties.Properties, error) {
	if s, ok := StandardWorkloads[strings.ToLower(nameOrPath)]; ok {
		return properties.LoadString(s)
	}
	if _, err := os.Stat(nameOrPath); err != nil {
		return nil, fmt.Errorf("%w: workload %q is not one of a-f and not a readable properties file: %v", ErrBadProperty, nameOrPath, err)
	}
	p, err := properties.LoadFile(nameOrPath, properties.UTF8)
	if err != nil {
		return nil, fmt.Errorf("%w: workload file %s: %v", ErrBadProperty, nameOrPath, err)
	}
	return p, nil
}
