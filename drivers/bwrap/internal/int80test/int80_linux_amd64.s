//go:build linux && amd64

#include "textflag.h"

// func Getpid32() uintptr
TEXT ·Getpid32(SB), NOSPLIT, $0-8
	MOVL	$20, AX // __NR_getpid in the i386 table
	INT	$0x80
	MOVQ	AX, ret+0(FP)
	RET
