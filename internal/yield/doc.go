// Package yield widens the windows of kvbuf's lock-free protocols in stress
// builds: the read paths (a point read between its loads of the visible
// number, the view and the store; the store's point read between its epoch
// and its iterator) and the flush's publication steps (a commit applied and
// not yet announced to the point-read cache; a released table published
// and not yet recycled) call Point there.
//
// In a normal build Point is an empty function the compiler inlines away:
// production binaries carry nothing. Built with -tags kvbuf_yield, Point
// yields the processor at random (one call in 8) and now and then sleeps a
// few microseconds (one in 256), so that a goroutine that would run a
// protocol's steps back to back is preempted between them as it would be,
// far more rarely, on a loaded machine. The stress tests
// (TestStressKVRecycledUnderReaders, TestStressKVFirstValues and the
// others of the engine's stress_test.go) run unchanged under the tag;
// doc/design.md ("Stress builds") lists the commands.
//
// Point takes no lock and writes no shared memory (math/rand/v2's
// generator is per goroutine state in the runtime), so it adds no
// happens-before edge that could hide a missing one from the race
// detector.
package yield
