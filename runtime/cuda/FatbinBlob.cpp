//===- FatbinBlob.cpp - The kernels' fatbin as a symbol in the binary -----===//
//
// TRAINC_CUDA_FATBIN is the path of nvcc's -fatbin output (runtime/CMakeLists.txt); the assembler
// includes its bytes, 64-byte aligned as cudaLibraryLoadData expects of a fatbin image.
//
//===----------------------------------------------------------------------===//

#define TRAINC_STR2(x) #x
#define TRAINC_STR(x) TRAINC_STR2(x)

__asm__(".section .rodata\n"
        ".balign 64\n"
        ".global trainc_cuda_fatbin\n"
        "trainc_cuda_fatbin:\n"
        ".incbin \"" TRAINC_STR(TRAINC_CUDA_FATBIN) "\"\n"
        ".global trainc_cuda_fatbin_end\n"
        "trainc_cuda_fatbin_end:\n"
        ".byte 0\n"
        ".previous\n");
