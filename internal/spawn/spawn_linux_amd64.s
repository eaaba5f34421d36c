#include "textflag.h"

// func vfork() (pid, errno uintptr)
//
// clone(CLONE_VM|CLONE_VFORK|SIGCHLD): the child runs on this stack until it
// calls execve or exits, while the parent waits. Both come back through the
// same return address, so it is kept in a register across the call rather
// than on the stack, where the child's own calls would overwrite it.
TEXT ·vfork(SB),NOSPLIT|NOFRAME,$0-16
	MOVQ	$0x4111, DI	// CLONE_VM|CLONE_VFORK|SIGCHLD
	MOVQ	$0, SI		// the same stack
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$56, AX		// SYS_clone
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$0, pid+0(FP)
	NEGQ	AX
	MOVQ	AX, errno+8(FP)
	RET
ok:
	MOVQ	AX, pid+0(FP)
	MOVQ	$0, errno+8(FP)
	RET
